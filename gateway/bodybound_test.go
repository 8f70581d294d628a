package gateway_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/gateway/history"
	"sless.dev/sless/test/testkit"
)

var boundKey = []byte("body-bound-test-hmac-key-0123456789abcdef")

// boundBackend routes a fixed table; the rest of Backend is never called.
type boundBackend struct {
	backend.Backend
	routes map[string]backend.Route
	rt     http.RoundTripper
}

func (b boundBackend) Route(ns, name string) (backend.Route, error) {
	r, ok := b.routes[ns+"/"+name]
	if !ok {
		return backend.Route{}, &backend.NotFoundError{Kind: "function", Namespace: ns, Name: name}
	}
	return r, nil
}

func (b boundBackend) Transport() http.RoundTripper { return b.rt }

// boundFunctions stands for the functions: "busy" holds its caller until release is closed,
// the others read the whole body and answer 200.
type boundFunctions struct {
	entered chan struct{}
	release chan struct{}
}

func (f boundFunctions) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasPrefix(r.URL.Host, "busy.") {
		f.entered <- struct{}{}
		<-f.release
	}
	if r.Body != nil {
		if _, err := io.ReadAll(r.Body); err != nil {
			return nil, err
		}
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// boundAsync queues nothing: no call in these tests gets that far.
type boundAsync struct{ backend.AsyncInvoker }

func (boundAsync) Enqueue(context.Context, history.AsyncRequest) (history.AsyncInvocation, bool, error) {
	return history.AsyncInvocation{}, false, errors.New("not in this test")
}

// TestBodyBoundBeforeRouting: every request's body is bounded from its arrival, so a call
// answered before its body is read (bad path, unknown function, missing or foreign token,
// disabled or undeployed function, held-request cap, worker fetch, function host) is
// answered and closed within the body timeout instead of net/http waiting for a body that
// trickles; an asynchronous call's body gets the body timeout too (408), and a /fn/ call's
// body, once its function is known, the function's timeout. The server keeps answering.
func TestBodyBoundBeforeRouting(t *testing.T) {
	const ns = "sless-team"
	fns := boundFunctions{entered: make(chan struct{}, 1), release: make(chan struct{})}
	t.Cleanup(func() { close(fns.release) })
	host := func(name string) string { return name + "." + ns + ".svc" }
	be := boundBackend{rt: fns, routes: map[string]backend.Route{
		ns + "/echo":    {Host: host("echo"), AsyncAttempts: 1},
		ns + "/slow":    {Host: host("slow"), Timeout: time.Second},
		ns + "/guarded": {Host: host("guarded"), RequireAuth: true},
		ns + "/off":     {Host: host("off"), Disabled: true},
		ns + "/pending": {},
		ns + "/busy":    {Host: host("busy")},
	}}
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: boundKey})
	if err != nil {
		t.Fatal(err)
	}
	const bodyTimeout = 300 * time.Millisecond
	srv, err := gateway.New(gateway.Config{Backend: be, Auth: auth, Async: boundAsync{}, FunctionsDomain: "fn.test",
		Conns: gateway.ConnLimits{BodyTimeout: bodyTimeout}, Proxy: gateway.ProxyConfig{MaxHeldPerFunction: 1},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := testkit.Serve(t, srv.HTTPServer())

	// busy's one allowed request is in flight.
	go func() {
		resp, err := http.Post("http://"+addr+"/fn/"+ns+"/busy", "text/plain", strings.NewReader("x"))
		if err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-fns.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the request holding busy did not reach it")
	}

	other := testkit.Token(t, boundKey, "someone-else")
	cases := []struct {
		host, path string
		header     []string
		status     string
		min, max   time.Duration
	}{
		{"", "/v1/namespaces/" + ns + "/functions", nil, "401", 0, 2 * time.Second},
		{"", "/fn/" + ns, nil, "404", 0, 2 * time.Second},
		{"", "/fn/" + ns + "/nope", nil, "404", 0, 2 * time.Second},
		{"", "/fn/" + ns + "/guarded", nil, "401", 0, 2 * time.Second},
		{"", "/fn/" + ns + "/guarded", []string{"Authorization: Bearer " + other}, "403", 0, 2 * time.Second},
		{"", "/fn/" + ns + "/off", nil, "503", 0, 2 * time.Second},
		{"", "/fn/" + ns + "/pending", nil, "503", 0, 2 * time.Second},
		{"", "/fn/" + ns + "/busy", nil, "503", 0, 2 * time.Second},
		{"", "/fn/" + ns + "/echo", []string{"Service-Worker: script"}, "403", 0, 2 * time.Second},
		{"nope." + ns + ".fn.test", "/", nil, "404", 0, 2 * time.Second},
		{"", "/fn/" + ns + "/echo", []string{"Prefer: respond-async"}, "408", 0, 2 * time.Second},
		// Once the function is known its timeout bounds the body, not the body timeout.
		{"", "/fn/" + ns + "/slow", nil, "408", 900 * time.Millisecond, 3 * time.Second},
	}
	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := c.host
			if h == "" {
				h = addr
			}
			status, closed := testkit.Trickle(t, addr, h, c.path, 100*time.Millisecond, 10*time.Second, c.header...)
			if status == "" {
				return
			}
			if !strings.Contains(status, " "+c.status+" ") || closed < c.min || closed > c.max {
				t.Errorf("POST %s (%s) %v with a trickling body: %q, closed after %s; want %s, closed after %s to %s",
					c.path, h, c.header, status, closed.Round(time.Millisecond), c.status, c.min, c.max)
			}
		}()
	}
	// Meanwhile the server answers others at once.
	testkit.Responsive(t, "http://"+addr+"/healthz", 5, 100*time.Millisecond)
	wg.Wait()

	// A body that arrives in time still reaches the function, past the body timeout's end.
	resp, err := http.Post("http://"+addr+"/fn/"+ns+"/echo", "text/plain", strings.NewReader(`{"hello":"world"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /fn/%s/echo: %d, want 200", ns, resp.StatusCode)
	}
}
