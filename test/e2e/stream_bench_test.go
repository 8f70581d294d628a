//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testkit"
)

// bulkGo streams 100 MiB in 32 KiB writes without a length, or with ?sse=1 one flushed
// event: the function's side of BenchmarkStreams, in the net/http form.
const bulkGo = `package handler

import "net/http"

var chunk = make([]byte, 32<<10)

func Handle(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("sse") != "" {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: first\n\n"))
		http.NewResponseController(w).Flush()
		return
	}
	for sent := 0; sent < 100<<20; sent += len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}
`

// BenchmarkStreams measures issue 29's stream figures on the real path, a kaniko-built Go
// function's pod behind the real interceptor: the time to an event stream's first byte and
// the throughput of a 100 MiB answer, read from the pod directly, through the interceptor
// alone and through gateway → interceptor, rounds alternating, medians. The ground's Service
// stand-in (a userspace copy where kube-proxy is kernel rules) sits between the interceptor
// and the pod on both proxied paths, and between the gateway and the interceptor on the
// last; the gateway's own share, that hop included, is the ratio of the last two.
// Run by hand (docs/benchmarks.md); not part of make test-e2e.
func BenchmarkStreams(b *testing.B) {
	const rounds, firstBytes = 3, 1000
	tn := newTenant(b)
	createAndUpload(b, tn, "bulk", api.FunctionFields{Runtime: ptr.To("go1.25"), TimeoutSec: ptr.To(int32(60)), MinReplicas: ptr.To(int32(1)), MaxReplicas: ptr.To(int32(1))},
		map[string]string{"handler.go": bulkGo})
	waitReady(b, tn, "bulk")
	waitServiceResolvable(b, tn, "bulk")
	host := rules.RevisionHost(tn.ns, workload(b, tn.ns, "bulk"), rules.DefaultDomain)
	// Around the gateway the calls are signed as the platform's are, or the wrapper refuses them.
	key := rules.FunctionKey(identityMaster(b), tn.ns, "bulk")
	paths := []struct {
		name string
		url  string
		host string
	}{
		{"pod directly", "http://" + readyPods(b, tn.ns, "bulk")[0].Status.PodIP + ":8080/", ""},
		{"interceptor alone", "http://127.0.0.1:" + strconv.Itoa(interceptorProxyPort) + "/", host},
		{"gateway → interceptor", gatewayPodURL(b) + "/fn/" + tn.ns + "/bulk", ""},
	}
	first := map[string][]time.Duration{}
	rate := map[string][]float64{}
	for range rounds {
		for _, p := range paths {
			tr := &http.Transport{}
			var rt http.RoundTripper = tr
			if !strings.Contains(p.url, "/fn/") {
				rt = signing{key: key, rt: tr}
			}
			c := &http.Client{Transport: hostTransport{host: p.host, rt: rt}, Timeout: 5 * time.Minute}
			d, err := testkit.FirstByte(c, p.url+"?sse=1", firstBytes)
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			first[p.name] = append(first[p.name], d)
			t0 := time.Now()
			resp, err := c.Get(p.url)
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || n != 100<<20 || resp.StatusCode != http.StatusOK {
				b.Fatalf("%s: %d, %d bytes, %v", p.name, resp.StatusCode, n, err)
			}
			rate[p.name] = append(rate[p.name], float64(n)/(1<<20)/time.Since(t0).Seconds())
			tr.CloseIdleConnections() // each path's rounds start on a new connection
		}
	}
	rep := fieldReport{log: b.Logf}
	direct, alone := median(first[paths[0].name]), median(first[paths[1].name])
	for _, p := range paths {
		d, r := median(first[p.name]), median(rate[p.name])
		rep.add("streams", p.name, "—", fmt.Sprintf("first byte %.3f ms, 100 MiB at %.0f MiB/s", ms(d), r),
			fmt.Sprintf("+%.3f ms over the pod, +%.3f ms over the interceptor; %.2f× the pod's rate, %.2f× the interceptor's",
				ms(d-direct), ms(d-alone), r/median(rate[paths[0].name]), r/median(rate[paths[1].name])))
	}
	b.Log("\n" + rep.String())
}

// hostTransport sends each request with host as its Host header, when set: the interceptor
// routes by it.
type hostTransport struct {
	host string
	rt   http.RoundTripper
}

func (h hostTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if h.host != "" {
		r = r.Clone(r.Context())
		r.Host = h.host
	}
	return h.rt.RoundTrip(r)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
