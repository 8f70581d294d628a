package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/history"
)

// recordedFunction keeps the header of the last request that reached it.
type recordedFunction struct {
	mu     sync.Mutex
	header http.Header
}

func (f *recordedFunction) RoundTrip(r *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.header = r.Header.Clone()
	f.mu.Unlock()
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain"}}, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
}

// recordedAsync keeps the last queued request.
type recordedAsync struct {
	backend.AsyncInvoker
	mu  sync.Mutex
	req history.AsyncRequest
}

func (a *recordedAsync) Enqueue(_ context.Context, req history.AsyncRequest) (history.AsyncInvocation, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.req = req
	inv := history.NewAsyncInvocation(req)
	inv.ID = history.NewAsyncID()
	return inv, true, nil
}

// TestGatewayOwnsItsHeadersAndHosts is attack 8 of issue 24: what a caller sends in the
// gateway's own X-Sless-* headers, and client-address claims, never reaches a function,
// on the synchronous path or in an asynchronous call's replay; and the console and /v1 are
// not served on the functions domain, its other subdomains or a trailing-dot variant.
func TestGatewayOwnsItsHeadersAndHosts(t *testing.T) {
	const ns = "sless-team"
	fn := &recordedFunction{}
	async := &recordedAsync{}
	be := boundBackend{rt: fn, routes: map[string]backend.Route{ns + "/echo": {Host: "echo." + ns + ".svc", AsyncAttempts: 1}}}
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: boundKey})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.New(gateway.Config{Backend: be, Auth: auth, Async: async, FunctionsDomain: "fn.localhost",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(srv)
	t.Cleanup(gw.Close)

	forged := map[string]string{
		"X-Sless-Trigger-Kind": "cron", "X-Sless-Schedule": "* * * * *", "X-Sless-Attempt": "1", "X-Sless-Trigger": "nightly",
		"X-Sless-Queue": "x", "X-Sless-Scheduled-Time": "2026-01-01T00:00:00Z", "x-sless-subject": "dev", "X-Sless-Anything": "x",
		"X-Real-Ip": "10.0.0.1", "Forwarded": "for=10.0.0.1", "X-Forwarded-For": "10.0.0.1", "X-Forwarded-Host": "evil",
	}
	call := func(prefer string) {
		t.Helper()
		req, _ := http.NewRequest("POST", gw.URL+"/fn/"+ns+"/echo", strings.NewReader("{}"))
		for k, v := range forged {
			req.Header.Set(k, v)
		}
		if prefer != "" {
			req.Header.Set("Prefer", prefer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
			t.Fatalf("call (Prefer %q): %d", prefer, resp.StatusCode)
		}
	}
	check := func(path string, h http.Header) {
		t.Helper()
		for k := range h {
			if strings.HasPrefix(k, "X-Sless-") || k == "X-Real-Ip" || k == "Forwarded" {
				t.Errorf("%s: the caller's %s: %q reached the function", path, k, h.Values(k))
			}
		}
		for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host"} {
			if v := h.Get(k); strings.Contains(v, "10.0.0.1") || strings.Contains(v, "evil") {
				t.Errorf("%s: %s = %q carries the caller's claim", path, k, v)
			}
		}
	}
	call("")
	fn.mu.Lock()
	check("synchronous", fn.header)
	fn.mu.Unlock()
	call("respond-async")
	async.mu.Lock()
	check("asynchronous", http.Header(async.req.Header))
	async.mu.Unlock()

	for _, host := range []string{"fn.localhost", "fn.localhost.", "a.fn.localhost", "x.y." + ns + ".fn.localhost", "UPPER_case.fn.localhost", "fn.localhost.:8080"} {
		for _, path := range []string{"/console/", "/v1/whoami", "/v1/openapi.yaml", "/healthz"} {
			req, _ := http.NewRequest("GET", gw.URL+path, nil)
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "gateway's own host") {
				t.Errorf("%s%s: %d %.80q, want 404: the API and console are not served on the functions domain", host, path, resp.StatusCode, body)
			}
		}
	}
	req, _ := http.NewRequest("GET", gw.URL+"/", nil)
	req.Host = "echo." + ns + ".fn.localhost."
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the function's own host with a trailing dot: %d, want the function", resp.StatusCode)
	}
}
