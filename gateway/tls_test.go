package gateway_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/test/testkit"
)

// TestGatewayOverTLS: served over TLS (sless gateway --tls-cert-file), the gateway speaks
// HTTP/2 by ALPN beside HTTP/1.1, /fn/ calls included, and its connection caps still count
// each TLS connection: a client beyond its share gets 429.
func TestGatewayOverTLS(t *testing.T) {
	const ns = "sless-team"
	fnAddr := testkit.Serve(t, &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from "+r.URL.Path)
	})})
	be := boundBackend{rt: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, fnAddr)
	}}, routes: map[string]backend.Route{ns + "/hello": {Host: "hello." + ns + ".svc"}}}
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: boundKey})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.New(gateway.Config{Backend: be, Auth: auth, Conns: gateway.ConnLimits{MaxConns: 100, MaxConnsPerClient: 2},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, clientTLS := testkit.TLSPair(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer()
	hs.TLSConfig = serverTLS
	go func() { _ = hs.ServeTLS(srv.Listener(ln), "", "") }()
	t.Cleanup(func() { _ = hs.Close() })
	url := "https://" + ln.Addr().String() + "/fn/" + ns + "/hello/x"

	var h1 http.Protocols
	h1.SetHTTP1(true)
	for _, tc := range []struct {
		proto string
		rt    *http.Transport
	}{
		{"HTTP/2.0", &http.Transport{TLSClientConfig: clientTLS.Clone(), ForceAttemptHTTP2: true}},
		{"HTTP/1.1", &http.Transport{TLSClientConfig: clientTLS.Clone(), Protocols: &h1}},
	} {
		t.Run(tc.proto, func(t *testing.T) {
			defer tc.rt.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tc.rt, Timeout: 10 * time.Second}).Get(url)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(body) != "hello from /x" || resp.Proto != tc.proto || resp.TLS == nil {
				t.Fatalf("%d %q over %s (TLS %v), want 200 from the function over %s with TLS", resp.StatusCode, body, resp.Proto, resp.TLS != nil, tc.proto)
			}
		})
	}

	// Two TLS connections held open, then a third from the same client.
	for i := range 3 {
		conn, err := tls.Dial("tcp", ln.Addr().String(), clientTLS.Clone())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if err := req.Write(conn); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: http.StatusTooManyRequests, false: http.StatusOK}[i == 2]; resp.StatusCode != want {
			t.Fatalf("TLS connection %d of one client (a share of 2): %d, want %d", i+1, resp.StatusCode, want)
		}
	}
}
