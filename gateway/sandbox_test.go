package gateway_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/backend"
)

// informational is what a function sends before its final answer: codes and their headers.
type informational struct {
	code   int
	header map[string]string
}

// informationalFunction answers every request with the 1xx answers of its path's case and
// then a page that would run on whatever origin it is given, with a cookie.
func informationalFunction(t *testing.T, cases map[string][]informational) string {
	t.Helper()
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, i := range cases[r.URL.Path] {
			for k, v := range i.header {
				w.Header().Set(k, v)
			}
			w.WriteHeader(i.code)
			clear(w.Header())
		}
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Set-Cookie", "session=stolen; Path=/")
		w.Header().Set("Service-Worker-Allowed", "/")
		_, _ = io.WriteString(w, "<script>fetch('/v1/whoami')</script>")
	}))
	up.Listener.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up.Listener = l
	up.Start()
	t.Cleanup(up.Close)
	return up.Listener.Addr().String()
}

// got1xx calls url and returns the informational answers the client saw and the final one.
func got1xx(t *testing.T, url, host string) ([]informational, *http.Response) {
	t.Helper()
	var (
		mu   sync.Mutex
		seen []informational
	)
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		mu.Lock()
		defer mu.Unlock()
		i := informational{code: code, header: map[string]string{}}
		for k := range h {
			i.header[k] = h.Get(k)
		}
		seen = append(seen, i)
		return nil
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	return seen, resp
}

// TestSandboxSurvivesInformationalAnswers is attack 1 of issue 24: a function that sends
// 1xx answers before its page (103 Early Hints with or without Link, several 1xx, a 100
// with headers) must not get its page onto the shared origin without the sandbox CSP or
// with a cookie, and no 1xx but a bare 100 Continue reaches the caller there. On the
// function's own host its answers pass as sent.
func TestSandboxSurvivesInformationalAnswers(t *testing.T) {
	const ns = "sless-team"
	cases := map[string][]informational{
		"/early-hints":      {{103, map[string]string{"Link": "</app.js>; rel=preload; as=script"}}},
		"/early-hints-bare": {{103, nil}},
		"/several": {
			{102, map[string]string{"Set-Cookie": "a=1"}},
			{103, map[string]string{"Link": "</a.css>; rel=preload; as=style", "Content-Security-Policy": "default-src *"}},
			{103, map[string]string{"Link": "</b.css>; rel=preload; as=style"}},
		},
		"/continue": {{100, map[string]string{"Set-Cookie": "c=1", "Link": "</c.js>; rel=preload"}}},
		"/plain":    nil,
	}
	fnAddr := informationalFunction(t, cases)
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, fnAddr)
	}
	be := boundBackend{rt: &http.Transport{DialContext: dial}, routes: map[string]backend.Route{
		ns + "/page": {Host: "page." + ns + ".svc"},
	}}
	auth, err := gateway.NewJWTAuth(gateway.JWTConfig{HMACKey: boundKey})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.New(gateway.Config{Backend: be, Auth: auth, FunctionsDomain: "fn.test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(srv)
	t.Cleanup(gw.Close)

	for path := range cases {
		t.Run("shared origin "+path, func(t *testing.T) {
			seen, resp := got1xx(t, gw.URL+"/fn/"+ns+"/page"+path, "")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if csp := resp.Header.Values("Content-Security-Policy"); len(csp) != 1 || !strings.HasPrefix(csp[0], "sandbox ") {
				t.Errorf("final answer's Content-Security-Policy = %q, want the sandbox alone", csp)
			}
			for _, k := range []string{"Set-Cookie", "Service-Worker-Allowed"} {
				if v := resp.Header.Get(k); v != "" {
					t.Errorf("final answer carries %s: %q", k, v)
				}
			}
			for _, i := range seen {
				if i.code != http.StatusContinue {
					t.Errorf("a %d answer reached the caller on the shared origin: %v", i.code, i.header)
				} else if len(i.header) != 0 {
					t.Errorf("100 Continue carried the function's headers: %v", i.header)
				}
			}
		})
	}

	t.Run("function host", func(t *testing.T) {
		seen, resp := got1xx(t, gw.URL+"/early-hints", "page."+ns+".fn.test")
		if len(seen) != 1 || seen[0].code != http.StatusEarlyHints || seen[0].header["Link"] == "" {
			t.Errorf("1xx answers on the function's own host: %v, want its 103 with Link", seen)
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Security-Policy") != "" || resp.Header.Get("Set-Cookie") == "" {
			t.Errorf("final answer on the function's own host: %d CSP %q cookie %q, want it as sent",
				resp.StatusCode, resp.Header.Get("Content-Security-Policy"), resp.Header.Get("Set-Cookie"))
		}
	})
}
