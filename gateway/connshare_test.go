package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/test/testkit"
)

// upgradeFunction answers an "Upgrade: echo" request with 101 and echoes what follows, and
// any other request with 200.
func upgradeFunction(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\nSet-Cookie: sid=tossed; Path=/\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(conn, brw)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// shareGateway serves one function "echo" on a gateway with limits, on s.Listener.
func shareGateway(t *testing.T, limits gateway.ConnLimits) (addr, ns string) {
	t.Helper()
	ns = "sless-team"
	fnAddr := upgradeFunction(t)
	be := boundBackend{rt: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, fnAddr)
	}},
		routes: map[string]backend.Route{ns + "/echo": {Host: "echo." + ns + ".svc"}}}
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: boundKey})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.New(gateway.Config{Backend: be, Auth: auth, Conns: limits,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return serveGateway(t, srv), ns
}

// from dials addr from the loopback address src, a client of its own.
func from(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// get sends one keep-alive GET of path on conn and returns the answer's status.
func get(t *testing.T, conn net.Conn, br *bufio.Reader, path string, header ...string) *http.Response {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	defer conn.SetDeadline(time.Time{})
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: gw\r\n%s\r\n", path, strings.Join(header, "")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp
}

// TestOneClientCannotTakeEveryConnection is attack 5 of issue 24: one client holding 1,000
// keep-alive connections (one /healthz each) made every other caller's /fn/ a 503. Its
// share is a quarter of the cap: beyond it its requests get 429 and the connection is
// closed, while another client is served on /healthz and /fn/.
func TestOneClientCannotTakeEveryConnection(t *testing.T) {
	addr, ns := shareGateway(t, gateway.ConnLimits{MaxConns: 1000})
	var served, refused int
	for range 1000 {
		conn := from(t, "127.0.0.2", addr)
		resp := get(t, conn, bufio.NewReader(conn), "/healthz")
		switch {
		case resp.StatusCode == http.StatusOK:
			served++
		case resp.StatusCode == http.StatusTooManyRequests && resp.Close && resp.Header.Get("Retry-After") != "":
			refused++
			conn.Close()
		default:
			t.Fatalf("the flooding client's connection %d: %d close=%v", served+refused, resp.StatusCode, resp.Close)
		}
	}
	if served != 250 || refused != 750 {
		t.Fatalf("the flooding client was served on %d connections and refused on %d; want 250 and 750", served, refused)
	}
	other := from(t, "127.0.0.3", addr)
	br := bufio.NewReader(other)
	for _, path := range []string{"/healthz", "/fn/" + ns + "/echo"} {
		if resp := get(t, other, br, path); resp.StatusCode != http.StatusOK {
			t.Fatalf("another client's %s while one holds its share: %d", path, resp.StatusCode)
		}
	}
}

// upgrade opens an echo connection to the function through the gateway from src.
func upgrade(t *testing.T, src, addr, ns string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn := from(t, src, addr)
	br := bufio.NewReader(conn)
	if resp := get(t, conn, br, "/fn/"+ns+"/echo", "Connection: Upgrade\r\nUpgrade: echo\r\n"); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d", resp.StatusCode)
	}
	return conn, br
}

// echo sends b on an upgraded connection and reads it back.
func echo(t *testing.T, conn net.Conn, br *bufio.Reader, b string) error {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	defer conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, b); err != nil {
		return err
	}
	got := make([]byte, len(b))
	if _, err := io.ReadFull(br, got); err != nil {
		return err
	}
	if string(got) != b {
		return fmt.Errorf("echoed %q, want %q", got, b)
	}
	return nil
}

// TestUpgradedConnectionsStayBounded: a connection an upgrade took over still counts
// against its client's share until it closes, and one with no byte either way for the idle
// timeout is closed by the gateway, while one in use stays open past it.
func TestUpgradedConnectionsStayBounded(t *testing.T) {
	const idle = 400 * time.Millisecond
	addr, ns := shareGateway(t, gateway.ConnLimits{MaxConns: 100, MaxConnsPerClient: 3, IdleTimeout: idle})

	for range 3 {
		upgrade(t, "127.0.0.2", addr, ns)
	}
	conn := from(t, "127.0.0.2", addr)
	if resp := get(t, conn, bufio.NewReader(conn), "/healthz"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a fourth connection of a client holding three upgraded ones: %d, want 429", resp.StatusCode)
	}

	busy, bbr := upgrade(t, "127.0.0.4", addr, ns)
	for i := range 10 { // 1 s, past the idle timeout, a byte every 100 ms
		if err := echo(t, busy, bbr, fmt.Sprint(i)); err != nil {
			t.Fatalf("an upgraded connection in use, after %d echoes: %v", i, err)
		}
		time.Sleep(idle / 4)
	}
	quiet, qbr := upgrade(t, "127.0.0.5", addr, ns)
	if err := echo(t, quiet, qbr, "x"); err != nil {
		t.Fatal(err)
	}
	_ = quiet.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	_, err := qbr.ReadByte()
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("an idle upgraded connection was still open after %v (idle timeout %v)", time.Since(start), idle)
	case err == nil:
		t.Fatal("an idle upgraded connection sent a byte")
	}
}

// TestUpgradeTakesTheRoutesRules: an upgrade (a WebSocket's) is a call of /fn/ like any
// other: a route that requires auth refuses it without a token of the function's tenant
// (401, 403) and never reaches the function, and the 101 on the shared origin carries the
// sandbox policy and none of the headers a function may not send there (a browser takes a
// WebSocket handshake's cookies).
func TestUpgradeTakesTheRoutesRules(t *testing.T) {
	ns := api.TenantNamespace("team")
	fnAddr := upgradeFunction(t)
	be := boundBackend{rt: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, fnAddr)
	}}, routes: map[string]backend.Route{ns + "/guarded": {Host: "guarded." + ns + ".svc", RequireAuth: true}}}
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: boundKey})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.New(gateway.Config{Backend: be, Auth: auth, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := testkit.Serve(t, srv.HTTPServer())
	const up = "Connection: Upgrade\r\nUpgrade: echo\r\n"
	for _, tc := range []struct {
		name, header string
		want         int
	}{
		{"no token", up, http.StatusUnauthorized},
		{"another tenant's token", up + "Authorization: Bearer " + testkit.Token(t, boundKey, "someone-else") + "\r\n", http.StatusForbidden},
		{"the tenant's token", up + "Authorization: Bearer " + testkit.Token(t, boundKey, "team") + "\r\n", http.StatusSwitchingProtocols},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := from(t, "127.0.0.1", addr)
			br := bufio.NewReader(conn)
			resp := get(t, conn, br, "/fn/"+ns+"/guarded", tc.header)
			if resp.StatusCode != tc.want {
				t.Fatalf("upgrade: %d, want %d", resp.StatusCode, tc.want)
			}
			if tc.want != http.StatusSwitchingProtocols {
				return
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox") || resp.Header.Get("Set-Cookie") != "" {
				t.Errorf("the 101 on the shared origin has CSP %q and Set-Cookie %q; want the sandbox and no cookie", csp, resp.Header.Get("Set-Cookie"))
			}
			if err := echo(t, conn, br, "through"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// readingGateway serves one function "read" that reads each request's body to its end and
// answers 200 (as the wrappers do, which read the body before the handler runs) on a gateway
// with conns and proxy, on s.Listener. Each request the function gets is reported on entered.
func readingGateway(t *testing.T, conns gateway.ConnLimits, proxy gateway.ProxyConfig) (addr, url string, entered <-chan struct{}) {
	t.Helper()
	const ns = "sless-team"
	in := make(chan struct{}, 1000)
	fnAddr := testkit.Serve(t, &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in <- struct{}{}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		_, _ = io.WriteString(w, "ok")
	})})
	be := boundBackend{rt: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, fnAddr)
	}}, routes: map[string]backend.Route{ns + "/read": {Host: "read." + ns + ".svc"}}}
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: boundKey})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.New(gateway.Config{Backend: be, Auth: auth, Conns: conns, Proxy: proxy,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr = serveGateway(t, srv)
	return addr, "http://" + addr + "/fn/" + ns + "/read", in
}

// h2cFrom is a client speaking HTTP/2 without TLS from the loopback address src: every call
// a stream on one connection once the first call made it.
func h2cFrom(t *testing.T, src string) *http.Client {
	t.Helper()
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	rt := &http.Transport{Protocols: &h2c, DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext}
	t.Cleanup(rt.CloseIdleConnections)
	return &http.Client{Transport: rt, Timeout: 20 * time.Second}
}

// holdStreams sends n POSTs to url on c, each declaring a body of 1,000 bytes it never sends,
// and sends the statuses of those answered (the others are held) on answers as they come.
// The streams end with the test.
func holdStreams(t *testing.T, c *http.Client, url string, n int, answers chan<- int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for range n {
		body, never := io.Pipe()
		t.Cleanup(func() { never.CloseWithError(errors.New("test over")) })
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = 1000
		go func() {
			resp, err := c.Do(req)
			if err != nil {
				return
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
				answers <- -resp.StatusCode // a refusal must say when to retry
				return
			}
			answers <- resp.StatusCode
		}()
	}
}

// collect reads n statuses from answers within 10 s.
func collect(t *testing.T, answers <-chan int, n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	for range n {
		select {
		case code := <-answers:
			got[code]++
		case <-time.After(10 * time.Second):
			t.Fatalf("%d answers, want %d: %v", len(got), n, got)
		}
	}
	return got
}

// awaitEntered waits for n requests to reach the function.
func awaitEntered(t *testing.T, entered <-chan struct{}, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d held requests reached the function", i, n)
		}
	}
}

// TestStreamsCountAgainstTheClientsShare is attack 7 of issue 51 scaled down: one client's
// HTTP/2 streams with a body that never comes took every slot of a public function (4
// connections × 250 streams, within the share of connections) and others got 503. A
// client's share is of requests in flight: a quarter of the function's cap by default, so
// two connections × 30 streams hold 10 of its 40 slots, the other 50 streams get 429 with
// Retry-After, and another client's call to the same function is answered.
func TestStreamsCountAgainstTheClientsShare(t *testing.T) {
	_, url, entered := readingGateway(t, gateway.ConnLimits{MaxConns: 1000}, gateway.ProxyConfig{MaxHeldPerFunction: 40})
	flood := []*http.Client{h2cFrom(t, "127.0.0.2"), h2cFrom(t, "127.0.0.2")}
	for _, c := range flood { // each client's one connection
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Proto != "HTTP/2.0" {
			t.Fatalf("the flooding client speaks %s, want HTTP/2.0", resp.Proto)
		}
		awaitEntered(t, entered, 1)
	}
	answers := make(chan int, 60)
	for _, c := range flood {
		holdStreams(t, c, url, 30, answers)
	}
	awaitEntered(t, entered, 10)
	if refused := collect(t, answers, 50); len(refused) != 1 || refused[http.StatusTooManyRequests] != 50 {
		t.Fatalf("the flooding client's 60 streams: answers %v beside the held ones; want 50 × 429 with Retry-After", refused)
	}
	resp, err := h2cFrom(t, "127.0.0.3").Post(url, "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("another client's call while one holds its share: %d, want 200", resp.StatusCode)
	}
}

// TestOneShareForHTTP1AndHTTP2: a client's HTTP/1.1 requests and HTTP/2 streams count
// against one share of requests in flight, whichever comes first: 6 HTTP/1.1 requests held
// on 6 connections leave 4 of a share of 10 to its streams, and then its next HTTP/1.1
// request, on any path, is refused too (429, the connection kept).
func TestOneShareForHTTP1AndHTTP2(t *testing.T) {
	addr, url, entered := readingGateway(t, gateway.ConnLimits{MaxConns: 1000, MaxRequestsPerClient: 10}, gateway.ProxyConfig{})
	const src = "127.0.0.4"
	for range 6 {
		conn := from(t, src, addr)
		if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: gw\r\nContent-Length: 1000\r\n\r\n", strings.TrimPrefix(url, "http://"+addr)); err != nil {
			t.Fatal(err)
		}
	}
	awaitEntered(t, entered, 6)
	streams := make(chan int, 10)
	holdStreams(t, h2cFrom(t, src), url, 10, streams)
	awaitEntered(t, entered, 4)
	if got := collect(t, streams, 6); len(got) != 1 || got[http.StatusTooManyRequests] != 6 {
		t.Fatalf("10 streams of a client holding 6 HTTP/1.1 requests of a share of 10: answers %v beside the held ones; want 6 × 429 with Retry-After", got)
	}
	conn := from(t, src, addr)
	if resp := get(t, conn, bufio.NewReader(conn), "/healthz"); resp.StatusCode != http.StatusTooManyRequests || resp.Close {
		t.Fatalf("an HTTP/1.1 request of a client holding its share in streams and requests: %d (close %v), want 429 on a kept connection", resp.StatusCode, resp.Close)
	}
	other := from(t, "127.0.0.5", addr)
	if resp := get(t, other, bufio.NewReader(other), "/healthz"); resp.StatusCode != http.StatusOK {
		t.Fatalf("another client meanwhile: %d, want 200", resp.StatusCode)
	}
}
