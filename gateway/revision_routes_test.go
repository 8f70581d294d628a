package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testkit"
)

// namedRoutes routes the functions it knows; the upstream answers with the host it was
// called on, so a test sees which revision the gateway chose.
type namedRoutes struct {
	*memBackend
	mu        *sync.Mutex
	routes    map[string]backend.Route
	transport http.RoundTripper
}

func (b namedRoutes) Route(ns, name string) (backend.Route, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.routes[name]
	if !ok {
		return backend.Route{}, &backend.NotFoundError{Kind: "function", Namespace: ns, Name: name}
	}
	return r, nil
}
func (b namedRoutes) Transport() http.RoundTripper { return b.transport }

// TestTagHostAndHeaders: a tag is reached on its own host <tag>-<function>.<ns>.<domain> and
// with X-Sless-Tag on the function's URL; a label naming a function is that function even
// when it looks like a tag host; every answer names its revision, a function's own
// X-Sless-Revision is not believed; an unknown tag is 404.
func TestTagHostAndHeaders(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(rules.HeaderRevision, "forged")
		_, _ = io.WriteString(w, r.Host)
	}))
	defer upstream.Close()
	addr := upstream.Listener.Addr().String()
	transport := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	target := func(rev string, pct int32, tag string) backend.RouteTarget {
		return backend.RouteTarget{ResolvedTarget: rules.ResolvedTarget{Revision: rev, Percent: pct, Tag: tag}, Host: rules.RevisionHost("ns", rev, "fn.local")}
	}
	routes := map[string]backend.Route{
		"hello":        {Targets: []backend.RouteTarget{target("hello-1", 100, ""), target("hello-2", 0, "canary")}},
		"canary-hello": {Targets: []backend.RouteTarget{target("canary-hello-1", 100, "")}},
	}
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: memKey})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	srv, err := gateway.New(gateway.Config{Backend: namedRoutes{newMemBackend(), &mu, routes, transport}, Auth: auth, FunctionsDomain: "fn.test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(srv)
	defer gw.Close()
	call := func(host, path string, header map[string]string) (int, string, string) {
		t.Helper()
		resp, b := testkit.Get(t, gw.URL+path, host, header)
		return resp.StatusCode, resp.Header.Values(rules.HeaderRevision)[0], string(b)
	}
	for _, tc := range []struct {
		name, host, path string
		header           map[string]string
		code             int
		rev              string
	}{
		{"the function's URL", "", "/fn/ns/hello", nil, 200, "hello-1"},
		{"the tag header", "", "/fn/ns/hello", map[string]string{rules.HeaderTag: "canary"}, 200, "hello-2"},
		{"the function's host", "hello.ns.fn.test", "/", nil, 200, "hello-1"},
		{"the tag host", "canary-hello.ns.fn.test", "/", nil, 200, "canary-hello-1"}, // a function of that name wins
	} {
		host := tc.host
		if host == "" {
			host = strings.TrimPrefix(gw.URL, "http://")
		}
		code, rev, body := call(host, tc.path, tc.header)
		if code != tc.code || rev != tc.rev || body != rules.RevisionHost("ns", tc.rev, "fn.local") {
			t.Errorf("%s: %d from %q (%s), want %d from %s", tc.name, code, rev, body, tc.code, tc.rev)
		}
	}
	mu.Lock()
	delete(routes, "canary-hello")
	mu.Unlock()
	if code, rev, _ := call("canary-hello.ns.fn.test", "/", nil); code != 200 || rev != "hello-2" {
		t.Errorf("tag host: %d from %q, want hello-2", code, rev)
	}
	req, _ := http.NewRequest(http.MethodGet, gw.URL+"/fn/ns/hello", nil)
	req.Header.Set(rules.HeaderTag, "nope")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown tag: %d, want 404", resp.StatusCode)
	}
}
