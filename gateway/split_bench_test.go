package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/rules"
)

// routeBackend routes every function to route and carries calls to one upstream, whatever
// the host.
type routeBackend struct {
	*memBackend
	route     backend.Route
	transport http.RoundTripper
}

func (b routeBackend) Route(string, string) (backend.Route, error) { return b.route, nil }
func (b routeBackend) Transport() http.RoundTripper                { return b.transport }

// BenchmarkRevisionSplit measures the /fn/ hop of a function with one revision against the
// same function split 50/50 between two, in one process through the same client and
// upstream; the difference is what the split costs. The gateway is served as sless gateway
// serves it (HTTPServer on Listener), so a call also pays the per-connection and per-client
// bounds. Reported: p50 and p99 of a call, in µs.
//
//	go test ./gateway -run XXX -bench RevisionSplit -count 5
func BenchmarkRevisionSplit(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer upstream.Close()
	addr := upstream.Listener.Addr().String()
	transport := &http.Transport{MaxIdleConnsPerHost: 64, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	target := func(rev string, pct int32) backend.RouteTarget {
		return backend.RouteTarget{ResolvedTarget: rules.ResolvedTarget{Revision: rev, Percent: pct}, Host: rules.RevisionHost("ns", rev, "fn.local")}
	}
	routes := map[string]backend.Route{
		"single": {Targets: []backend.RouteTarget{target("f-1", 100)}},
		"split":  {Targets: []backend.RouteTarget{target("f-1", 50), target("f-2", 50)}},
	}
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: memKey})
	if err != nil {
		b.Fatal(err)
	}
	servers := map[string]string{}
	for name, route := range routes {
		srv, err := gateway.New(gateway.Config{Backend: routeBackend{newMemBackend(), route, transport}, Auth: auth, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		hs := srv.HTTPServer() // served as sless gateway serves it: its bounds per connection and client
		go func() { _ = hs.Serve(srv.Listener(ln)) }()
		defer hs.Close()
		servers[name] = "http://" + ln.Addr().String() + "/fn/ns/f"
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	call := func(url string) time.Duration {
		start := time.Now()
		resp, err := client.Post(url, "application/json", nil)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get(rules.HeaderRevision) == "" {
			b.Fatalf("%s: %d, revision %q", url, resp.StatusCode, resp.Header.Get(rules.HeaderRevision))
		}
		return time.Since(start)
	}
	for _, name := range []string{"single", "split"} {
		call(servers[name]) // warm the connections
	}
	for _, name := range []string{"single", "split"} {
		b.Run(name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				lat = append(lat, call(servers[name]))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
		})
	}
}
