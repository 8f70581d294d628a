package cluster_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/test/testkit"
)

// TestProxyBoundsEarlyAnswers: the cluster gateway, served as `sless gateway` serves it,
// answers and closes within its body timeout a /fn/ call it answers before reading the body
// (unknown function, require_auth without a token, an asynchronous call it takes none of)
// while the body trickles, and still bounds a routed call's body by the function's timeout.
func TestProxyBoundsEarlyAnswers(t *testing.T) {
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL})
	alice := h.tenant()
	h.deploy(alice, "public", 1)
	h.deploy(alice, "private", 0)
	if _, err := alice.c.CreateTrigger(context.Background(), alice.ns, api.CreateTrigger{Name: "private-http", TriggerFields: api.TriggerFields{
		Type: ptr.To("http"), Function: ptr.To("private"), RequireAuth: ptr.To(true)}}); err != nil {
		t.Fatal(err)
	}
	h.waitRoute(alice.ns, "private", func(r backend.Route) bool { return r.RequireAuth })

	// The harness serves with httptest's server; this one has the gateway's own limits.
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: hmacKey})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.New(gateway.Config{Backend: h.backend, Auth: auth, Conns: gateway.ConnLimits{BodyTimeout: 300 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := testkit.Serve(t, srv.HTTPServer())

	cases := []struct {
		path     string
		header   []string
		status   string
		min, max time.Duration
	}{
		{"/fn/" + alice.ns + "/nope", nil, "404", 0, 2 * time.Second},
		{"/fn/" + alice.ns + "/private", nil, "401", 0, 2 * time.Second},
		{"/fn/" + alice.ns + "/public", []string{"Prefer: respond-async"}, "501", 0, 2 * time.Second},
		{"/fn/" + alice.ns + "/public", nil, "408", 900 * time.Millisecond, 3 * time.Second},
	}
	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, closed := testkit.Trickle(t, addr, "", c.path, 100*time.Millisecond, 10*time.Second, c.header...)
			if status == "" {
				return
			}
			if !strings.Contains(status, " "+c.status+" ") || closed < c.min || closed > c.max {
				t.Errorf("POST %s %v with a trickling body: %q, closed after %s; want %s, closed after %s to %s",
					c.path, c.header, status, closed.Round(time.Millisecond), c.status, c.min, c.max)
			}
		}()
	}
	testkit.Responsive(t, "http://"+addr+"/healthz", 5, 100*time.Millisecond)
	wg.Wait()
}
