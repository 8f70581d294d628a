package cluster_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/api"
)

// trickleBody sends a request with a 1,000-byte body at a byte every 100 ms (the header lines
// given first) and reports the status line and when the server closed the connection. A
// failure is an error and an empty status (it runs off the test's goroutine).
func trickleBody(t *testing.T, addr, path string, header ...string) (string, time.Duration) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return "", 0
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000\r\n", path, addr)
	for _, h := range header {
		fmt.Fprintf(conn, "%s\r\n", h)
	}
	fmt.Fprint(conn, "\r\n")
	go func() {
		for range 1000 {
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Errorf("POST %s %v: no answer to a trickling body after %s: %v", path, header, time.Since(start).Round(time.Millisecond), err)
		return "", time.Since(start)
	}
	// The server closes the connection; with the client's bytes still unread that is a reset.
	if _, err := io.Copy(io.Discard, r); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("POST %s %v: connection still open after %s: %v", path, header, time.Since(start).Round(time.Millisecond), err)
		return "", time.Since(start)
	}
	return strings.TrimSpace(line), time.Since(start)
}

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
		Type: ptr("http"), Function: ptr("private"), RequireAuth: ptr(true)}}); err != nil {
		t.Fatal(err)
	}
	h.waitRoute(alice.ns, "private", func(r gateway.Route) bool { return r.RequireAuth })

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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer()
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	addr := ln.Addr().String()

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
			status, closed := trickleBody(t, addr, c.path, c.header...)
			if status == "" {
				return
			}
			if !strings.Contains(status, " "+c.status+" ") || closed < c.min || closed > c.max {
				t.Errorf("POST %s %v with a trickling body: %q, closed after %s; want %s, closed after %s to %s",
					c.path, c.header, status, closed.Round(time.Millisecond), c.status, c.min, c.max)
			}
		}()
	}
	for range 5 {
		time.Sleep(100 * time.Millisecond)
		start := time.Now()
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Errorf("healthz while trickling bodies are sent: %v", err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || time.Since(start) > time.Second {
			t.Errorf("healthz while trickling bodies are sent: %d after %s", resp.StatusCode, time.Since(start))
		}
	}
	wg.Wait()
}
