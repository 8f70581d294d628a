package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/history"
	"sless.dev/sless/test/testkit"
)

// TestReservedPathsNotServed: the wrappers' own path (/healthz, answered by the runtime
// without the handler: a success the function never earned) is no caller's, in any spelling
// a wrapper or a cleaning server reads as it, on the shared origin and on a function host,
// synchronous or asynchronous: 404 from the gateway, nothing reaches the function, nothing
// is recorded. The function's other paths are its own.
func TestReservedPathsNotServed(t *testing.T) {
	const ns = "sless-team"
	var mu sync.Mutex
	var seen []string
	fnAddr := testkit.Serve(t, &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
		io.WriteString(w, `{"status":"ok"}`)
	})})
	be := boundBackend{rt: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, fnAddr)
	}}, routes: map[string]backend.Route{ns + "/hello": {Host: "hello." + ns + ".svc", AsyncAttempts: 1}}}
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: boundKey})
	if err != nil {
		t.Fatal(err)
	}
	rec := history.NewMemory(0)
	srv, err := gateway.New(gateway.Config{Backend: be, Auth: auth, Recorder: rec, Async: boundAsync{}, FunctionsDomain: "fn.test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveGateway(t, srv)
	call := func(method, host, path string, header ...string) int {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	fnHost := "hello." + ns + ".fn.test"
	for _, path := range []string{"/healthz", "/healthz?hold_ms=2000", "/%68ealthz", "//healthz", "/./healthz", "/x/../healthz", "/healthz/"} {
		for _, c := range []struct{ method, host, path string }{
			{http.MethodGet, addr, "/fn/" + ns + "/hello" + path},
			{http.MethodPost, addr, "/fn/" + ns + "/hello" + path},
			{http.MethodGet, fnHost, path},
		} {
			if code := call(c.method, c.host, c.path); code != http.StatusNotFound {
				t.Errorf("%s %s%s: %d, want 404", c.method, c.host, c.path, code)
			}
		}
		if code := call(http.MethodPost, addr, "/fn/"+ns+"/hello"+path, "Prefer", "respond-async"); code != http.StatusNotFound {
			t.Errorf("an asynchronous POST of %s: %d, want 404", path, code)
		}
	}
	for _, path := range []string{"/", "/healthz2", "/api/healthz", "/healthz/deep"} {
		if code := call(http.MethodGet, addr, "/fn/"+ns+"/hello"+path); code != http.StatusOK {
			t.Errorf("GET the function's own %s: %d, want 200", path, code)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, " ") != "/ /healthz2 /api/healthz /healthz/deep" {
		t.Errorf("the function saw %q; want only its own paths", seen)
	}
	page, err := rec.List(context.Background(), history.Query{Namespace: ns, Limit: 100})
	if err != nil || len(page.Records) != 4 {
		t.Errorf("%d records (%v); want the 4 calls the function answered", len(page.Records), err)
	}
}
