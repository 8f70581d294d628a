package devplane_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/testkit"
)

var benchRuntimes = []struct{ runtime, example string }{
	{"go1.25", "hello-go"},
	{"nodejs20", "hello-node"},
	{"python3.11", "hello-python"},
}

// BenchmarkColdStart measures first request → response through `sless dev` for a function
// at zero (process start, health check, forward), b.N cold starts per runtime, sandboxed
// (as root) and not; run with -benchtime=20x. Between samples the function scales to zero
// after its 1 s scale-down period.
func BenchmarkColdStart(b *testing.B) {
	for _, mode := range []struct {
		name string
		off  bool
	}{{"sandboxed", false}, {"plain", true}} {
		b.Run(mode.name, func(b *testing.B) { benchColdStart(b, devOptions{noSandbox: mode.off}) })
	}
}

func benchColdStart(b *testing.B, o devOptions) {
	d := startDev(b, o)
	for _, rt := range benchRuntimes {
		d.deploy(rt.example, rt.runtime, exampleFiles(b, rt.example), api.FunctionFields{ScaleDownPeriodSec: ptr.To[int32](1)})
	}
	for _, rt := range benchRuntimes {
		b.Run(rt.runtime, func(b *testing.B) {
			samples := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				testkit.WaitFor(b, "scale to zero", 30*time.Second, func() bool { return d.stats(rt.example).Processes == 0 })
				b.StartTimer()
				start := time.Now()
				code, body := d.invoke(rt.example, `{"name":"bench"}`)
				samples = append(samples, time.Since(start))
				if code != http.StatusOK {
					b.Fatalf("cold invocation: %d %s", code, body)
				}
			}
			b.StopTimer()
			slices.Sort(samples)
			b.ReportMetric(ms(percentile(samples, 50)), "p50-ms")
			b.ReportMetric(ms(percentile(samples, 95)), "p95-ms")
			b.ReportMetric(ms(samples[len(samples)-1]), "max-ms")
		})
	}
}

// BenchmarkWarmThroughput compares requests per second to one warm function process called
// directly with the same process called through `sless dev` (/fn/: gateway, auth-free route,
// pool) and through a bare stdlib reverse proxy, in the same run: two alternating rounds of
// each, 8 concurrent closed-loop clients. Run with -benchtime=1x.
func BenchmarkWarmThroughput(b *testing.B) {
	const (
		clients = 8
		round   = 3 * time.Second
	)
	d := startDev(b, devOptions{})
	for _, rt := range benchRuntimes {
		d.deploy(rt.example, rt.runtime, exampleFiles(b, rt.example),
			api.FunctionFields{MinReplicas: ptr.To[int32](1), MaxReplicas: ptr.To[int32](1)})
	}
	for _, rt := range benchRuntimes {
		b.Run(rt.runtime, func(b *testing.B) {
			testkit.WaitFor(b, "the warm process", 30*time.Second, func() bool { return d.stats(rt.example).Ready == 1 })
			addr := d.stats(rt.example).Addrs[0]
			toProcess := func(ctx context.Context, _, _ string) (net.Conn, error) { return d.backend.Pool().Dial(ctx, addr) }
			direct := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * clients, DialContext: toProcess}}
			viaDev := d.endpoint + "/fn/" + d.ns + "/" + rt.example
			bare := bareProxy(b, toProcess)
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * clients}}
			var directN, devN, bareN int64
			for range max(b.N, 1) * 2 {
				directN += load(b, direct, "http://"+addr+"/", clients, round)
				devN += load(b, hc, viaDev, clients, round)
				bareN += load(b, hc, bare, clients, round)
			}
			secs := 2 * float64(max(b.N, 1)) * round.Seconds()
			b.ReportMetric(float64(directN)/secs, "direct-rps")
			b.ReportMetric(float64(devN)/secs, "dev-rps")
			b.ReportMetric(float64(bareN)/secs, "bare-proxy-rps")
			b.ReportMetric(float64(devN)/float64(directN), "dev/direct")
			b.ReportMetric(float64(devN)/float64(bareN), "dev/bare-proxy")
		})
	}
}

// bareProxy is the smallest possible extra hop, a stdlib reverse proxy to the process dial
// reaches: it separates the cost of any proxy hop from the cost of sless's gateway and pool.
func bareProxy(b *testing.B, dial func(context.Context, string, string) (net.Conn, error)) string {
	target := &url.URL{Scheme: "http", Host: "function"}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: &http.Transport{MaxIdleConnsPerHost: 256, DialContext: dial}}
	srv := httptest.NewServer(rp)
	b.Cleanup(srv.Close)
	return srv.URL + "/"
}

// load POSTs to url from n clients for d and returns the number of 200 answers.
func load(b *testing.B, hc *http.Client, url string, n int, d time.Duration) int64 {
	var ok, failed atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				resp, err := hc.Post(url, "application/json", strings.NewReader(`{"name":"bench"}`))
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		b.Fatalf("%d requests to %s failed", failed.Load(), url)
	}
	return ok.Load()
}

func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(len(sorted)-1, i-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkStreamFirstByte compares the time to an event stream's first byte from one warm
// Go function process called directly with the same process called through `sless dev`
// (/fn/: gateway, pool) and through a bare stdlib reverse proxy, in the same run: 1,000 GETs
// one after another on one keep-alive connection per round, three alternating rounds,
// medians. Run with -benchtime=1x.
func BenchmarkStreamFirstByte(b *testing.B) {
	const calls = 1000
	d := startDev(b, devOptions{})
	d.deploy("live", "go1.25", dirFiles(b, filepath.Join("..", "buildkit", "testdata", "handlers", "gohttp")),
		api.FunctionFields{MinReplicas: ptr.To[int32](1), MaxReplicas: ptr.To[int32](1)})
	testkit.WaitFor(b, "the warm process", 30*time.Second, func() bool { return d.stats("live").Ready == 1 })
	addr := d.stats("live").Addrs[0]
	toProcess := func(ctx context.Context, _, _ string) (net.Conn, error) { return d.backend.Pool().Dial(ctx, addr) }
	targets := []struct {
		name string
		hc   *http.Client
		url  string
	}{
		{"direct", &http.Client{Transport: &http.Transport{DialContext: toProcess}}, "http://" + addr + "/tick"},
		{"dev", &http.Client{Transport: &http.Transport{}}, d.endpoint + "/fn/" + d.ns + "/live/tick"},
		{"bare-proxy", &http.Client{Transport: &http.Transport{}}, strings.TrimSuffix(bareProxy(b, toProcess), "/") + "/tick"},
	}
	rounds := map[string][]time.Duration{}
	for range max(b.N, 1) * 3 {
		for _, t := range targets {
			d, err := testkit.FirstByte(t.hc, t.url, calls)
			if err != nil {
				b.Fatal(err)
			}
			rounds[t.name] = append(rounds[t.name], d)
		}
	}
	med := func(name string) time.Duration {
		ds := slices.Clone(rounds[name])
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	b.ReportMetric(ms(med("direct")), "direct-ms")
	b.ReportMetric(ms(med("dev")), "dev-ms")
	b.ReportMetric(ms(med("bare-proxy")), "bare-proxy-ms")
	b.ReportMetric(ms(med("dev")-med("direct")), "dev-added-ms")
}
