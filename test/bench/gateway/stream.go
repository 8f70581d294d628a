package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"slices"
	"time"

	"sless.dev/sless/test/testkit"
)

// measureStreams prints the streaming figures of issue 29 for each target (gateway, bare
// proxy, direct upstream), rounds alternating, medians.
func measureStreams(up *upstream, gwPID int, targets []struct{ name, url string }) error {
	const ttfbCalls = 2000
	ttfb := map[string][]time.Duration{}
	rate := map[string][]float64{}
	for _, t := range targets { // warm-up
		firstBytes(t.url+"/sse", ttfbCalls/4)
		bulk(t.url + "/bulk")
	}
	for range *rounds {
		for _, t := range targets {
			ttfb[t.name] = append(ttfb[t.name], firstBytes(t.url+"/sse", ttfbCalls))
			rate[t.name] = append(rate[t.name], bulk(t.url+"/bulk"))
		}
	}
	fmt.Printf("streams: rounds %d (medians); time to first byte of an event stream over %d calls on one connection (median per round)\n", *rounds, ttfbCalls)
	med := func(vs []float64) float64 { slices.Sort(vs); return vs[len(vs)/2] }
	for _, t := range targets {
		ds := slices.Clone(ttfb[t.name])
		slices.Sort(ds)
		fmt.Printf("  %-8s first byte %7.3f ms   100 MiB streamed at %7.1f MiB/s\n", t.name, ms(ds[len(ds)/2]), med(slices.Clone(rate[t.name])))
	}
	mid := func(name string) time.Duration { ds := slices.Clone(ttfb[name]); slices.Sort(ds); return ds[len(ds)/2] }
	fmt.Printf("first byte added by the gateway over direct: %.3f ms (target <= 1 ms); over the bare proxy: %.3f ms\n",
		ms(mid("gateway")-mid("direct")), ms(mid("gateway")-mid("bare")))
	fmt.Printf("100 MiB throughput gateway/direct: %.2f (target >= 0.8); gateway/bare: %.2f\n",
		med(slices.Clone(rate["gateway"]))/med(slices.Clone(rate["direct"])), med(slices.Clone(rate["gateway"]))/med(slices.Clone(rate["bare"])))

	// Idle event streams held through the gateway, and new calls meanwhile, against the same
	// calls before (8 callers: the latency a caller sees, not the machine's saturation).
	const callers = 8
	quiet := loadAt(targets[0].url+"/x", 4000, callers)
	var before, held int64
	var during result
	hold(up, targets[0].url+"/idle", *idleStreams, func() { before = vm(gwPID, "VmRSS") }, func() {
		held = vm(gwPID, "VmRSS")
		during = loadAt(targets[0].url+"/x", 4000, callers)
	})
	fmt.Printf("%d idle SSE streams held through the gateway: VmRSS %.1f MB (%.1f MB before; target <= 200 MB)\n",
		*idleStreams, float64(held)/(1<<20), float64(before)/(1<<20))
	fmt.Printf("  new calls meanwhile (%d callers): p50 %.3f ms, p99 %.3f ms (target <= 50 ms), %.0f req/s; before: p50 %.3f ms, p99 %.3f ms, %.0f req/s\n",
		callers, ms(during.p50), ms(during.p99), during.rps, ms(quiet.p50), ms(quiet.p99), quiet.rps)
	return nil
}

// firstBytes makes n GETs of u one after another on one keep-alive connection and returns
// the median time from sending each to its first byte of body.
func firstBytes(u string, n int) time.Duration {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	d, err := testkit.FirstByte(&http.Client{Transport: tr}, u, n)
	if err != nil {
		log.Fatal(err)
	}
	return d
}

// bulk reads the 100 MiB stream of u and returns its rate in MiB/s.
func bulk(u string) float64 {
	t0 := time.Now()
	resp, err := http.Get(u)
	if err != nil {
		log.Fatalf("GET %s: %v", u, err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != bulkSize {
		log.Fatalf("GET %s: %d bytes, %v", u, n, err)
	}
	return float64(n) / (1 << 20) / time.Since(t0).Seconds()
}
