package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/history"
	"sless.dev/sless/test/testkit"
)

// TestStreamBounds: an answer of unknown length is cut by the gateway when it sends nothing
// for the function's stream idle bound, or at the invocation's deadline, and the cut is a
// clean end of the answer (the caller reads no error), with a final comment on an event
// stream; the function's request is cancelled so its producer stops. A stream that keeps
// sending is never cut for idleness, and a length-delimited answer is left alone. The
// history records each one's time to first byte, bytes sent and whether it streamed.
func TestStreamBounds(t *testing.T) {
	const ns = "sless-team"
	cancelled := make(chan string, 8)
	fn := http.NewServeMux()
	// hold writes head, then sends nothing until the caller (the gateway) goes away.
	hold := func(contentType, head string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", contentType)
			io.WriteString(w, head)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			cancelled <- r.URL.Path
		}
	}
	fn.Handle("/sse", hold("text/event-stream", "data: one\n\n"))
	fn.Handle("/half", hold("text/event-stream; charset=utf-8", "data: half"))
	fn.Handle("/chunks", hold("text/plain", "a"))
	fn.HandleFunc("/busy", func(w http.ResponseWriter, r *http.Request) {
		for range 8 {
			io.WriteString(w, "b")
			w.(http.Flusher).Flush()
			time.Sleep(200 * time.Millisecond)
		}
	})
	fn.HandleFunc("/endless", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for r.Context().Err() == nil {
			io.WriteString(w, "data: tick\n\n")
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
		cancelled <- r.URL.Path
	})
	fn.HandleFunc("/sized", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2")
		io.WriteString(w, "s")
		w.(http.Flusher).Flush()
		time.Sleep(1500 * time.Millisecond)
		io.WriteString(w, "s")
	})
	const idle = time.Second
	rec := history.NewMemory(0)
	addr := boundsGateway(t, fn, gateway.Config{Async: boundAsync{}, Recorder: rec})

	cases := []struct {
		fn, path, want string
		min, max       time.Duration
		cancelled      bool
	}{
		{"idle", "/sse", "data: one\n\n: stream idle for 1s; ended by the gateway\n\n", idle, idle + 2*time.Second, true},
		{"idle", "/half", "data: half\n: stream idle for 1s; ended by the gateway\n\n", idle, idle + 2*time.Second, true},
		{"idle", "/chunks", "a", idle, idle + 2*time.Second, true},
		{"idle", "/busy", "bbbbbbbb", 1600 * time.Millisecond, 4 * time.Second, false},
		{"idle", "/sized", "ss", 1500 * time.Millisecond, 4 * time.Second, false},
		{"bounded", "/endless", "", 1200 * time.Millisecond, 4 * time.Second, true},
	}
	// The same over HTTP/1.1 and HTTP/2 without TLS (h2c); the timeout is for a stream the
	// gateway failed to cut.
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	clients := map[string]*http.Client{"HTTP/1.1": {Timeout: 10 * time.Second},
		"HTTP/2.0": {Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &h2c}}}
	for proto, client := range clients {
		for _, tc := range cases {
			t.Run(tc.fn+tc.path+" over "+proto, func(t *testing.T) {
				start := time.Now()
				resp, err := client.Get("http://" + addr + "/fn/" + ns + "/" + tc.fn + tc.path)
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				took := time.Since(start)
				if err != nil {
					t.Fatalf("reading the answer: %v after %q: the cut must be a clean end", err, body)
				}
				if resp.StatusCode != http.StatusOK || resp.Proto != proto {
					t.Fatalf("status %d over %s, want 200 over %s", resp.StatusCode, resp.Proto, proto)
				}
				if tc.want != "" && string(body) != tc.want {
					t.Errorf("body %q, want %q", body, tc.want)
				}
				if tc.path == "/endless" {
					if !strings.HasPrefix(string(body), "data: tick\n\n") || !strings.HasSuffix(string(body), "\n\n: function timed out after 1s\n\n") {
						t.Errorf("body %q: want ticks, then the timeout's comment", body)
					}
				}
				if took < tc.min || took > tc.max {
					t.Errorf("answered in %s, want %s–%s", took, tc.min, tc.max)
				}
				var r history.Record
				testkit.WaitFor(t, "the invocation's record", 5*time.Second, func() bool {
					pg, err := rec.List(context.Background(), history.Query{Namespace: ns, Function: tc.fn, Limit: 1})
					if err != nil || len(pg.Records) == 0 || pg.Records[0].Start.Before(start) {
						return false
					}
					r = pg.Records[0]
					return true
				})
				if r.Bytes != int64(len(body)) || r.Streamed != (tc.path != "/sized") || r.TTFB <= 0 || r.TTFB > took || r.Status != history.StatusSucceeded {
					t.Errorf("recorded %+v: want %d bytes, streamed %v, a time to first byte within %s, succeeded", r, len(body), tc.path != "/sized", took)
				}
				if tc.cancelled {
					select {
					case p := <-cancelled:
						if p != tc.path {
							t.Errorf("the function saw %s cancelled, want %s", p, tc.path)
						}
					case <-time.After(5 * time.Second):
						t.Error("the function's request was not cancelled: its producer would go on")
					}
				}
			})
		}
	}
}

// boundsGateway serves, in namespace sless-team, fn as two functions on a gateway made of
// cfg: "idle" with a stream idle bound of 1 s, "bounded" with a timeout of 1 s (its deadline
// 1.2 s after the call) and an idle bound of an hour.
func boundsGateway(t *testing.T, fn http.Handler, cfg gateway.Config) string {
	t.Helper()
	const ns = "sless-team"
	fnAddr := testkit.Serve(t, &http.Server{Handler: fn, ReadHeaderTimeout: 5 * time.Second})
	rt := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, fnAddr)
	}}
	cfg.Backend = boundBackend{rt: rt, routes: map[string]backend.Route{
		ns + "/idle":    {Host: "idle." + ns + ".svc", StreamIdle: time.Second},
		ns + "/bounded": {Host: "bounded." + ns + ".svc", StreamIdle: time.Hour, Timeout: time.Second},
	}}
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: boundKey})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Auth = auth
	cfg.Proxy = gateway.ProxyConfig{ColdStartTimeout: 100 * time.Millisecond, TimeoutMargin: 100 * time.Millisecond}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serveGateway(t, srv)
}

// serveGateway serves srv as sless gateway does, on its Listener, and returns the address.
func serveGateway(t *testing.T, srv *gateway.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer()
	go func() { _ = hs.Serve(srv.Listener(ln)) }()
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String()
}
