package pool

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkRoundTrip isolates the pool's own cost per request: the same warm process called
// through Pool.RoundTrip (pick a process, count the request, release on body close) and
// through a plain http.Transport, in the same run.
//
//	go test -run '^$' -bench RoundTrip -benchtime=3s ./scaling/local/
func BenchmarkRoundTrip(b *testing.B) {
	p := newPool(b, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := p.Set("bench", Spec{Artifact: shared, MinProcs: 1, MaxProcs: 1, Target: 1000, ScaleDown: time.Minute}); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for p.Stats("bench").Ready == 0 {
		if time.Now().After(deadline) {
			b.Fatal("no warm process")
		}
		time.Sleep(10 * time.Millisecond)
	}
	addr := p.Stats("bench").Addrs[0]
	plain := &http.Transport{MaxIdleConnsPerHost: 256, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return p.Dial(ctx, addr) }}
	defer plain.CloseIdleConnections()
	cases := []struct {
		name string
		rt   http.RoundTripper
		host string
	}{
		{"direct", plain, addr},
		{"pool", p, "bench"},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest(http.MethodPost, "http://"+tc.host+"/", strings.NewReader(`{}`))
					resp, err := tc.rt.RoundTrip(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}
