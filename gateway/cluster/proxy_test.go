package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/gateway/cluster"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
	"sless.dev/sless/test/pgtest"
	"sless.dev/sless/test/testkit"
)

// upstream is a real HTTP server standing where the KEDA interceptor would be.
type upstream struct {
	*httptest.Server
	release  chan struct{} // closed to let /block and /stream finish
	started  chan string   // /hang, /block and /stream-in report arrival
	canceled atomic.Int32  // /hang requests whose context ended
	lastHost atomic.Value
}

type echoed struct {
	Host, Path, RawPath, Query, Method, Body string
	Header                                   http.Header
}

// doEcho sends req to the echoing upstream and decodes what it saw; anything but a 200 fails t.
func doEcho(t *testing.T, req *http.Request) (echoed, *http.Response) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got echoed
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	return got, resp
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{release: make(chan struct{}), started: make(chan string, 100)}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(func() {
		select {
		case <-u.release:
		default:
			close(u.release)
		}
		u.Server.Close()
	})
	return u
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	u.lastHost.Store(r.Host)
	switch {
	case strings.HasSuffix(r.URL.Path, "/hang"):
		u.started <- "hang"
		<-r.Context().Done()
		u.canceled.Add(1)
	case strings.HasSuffix(r.URL.Path, "/cold"):
		// The interceptor holds a request to a function at zero until an instance is ready.
		time.Sleep(1500 * time.Millisecond)
		w.Header().Set(rules.HeaderBackendColdStart, "true")
		_, _ = io.WriteString(w, "woken")
	case strings.HasSuffix(r.URL.Path, "/block"):
		u.started <- "block"
		<-u.release
		_, _ = io.WriteString(w, "released")
	case strings.HasSuffix(r.URL.Path, "/stream-out"):
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-u.release
		_, _ = io.WriteString(w, "second\n")
	case strings.HasSuffix(r.URL.Path, "/stream-in"):
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		u.started <- string(buf)
		rest, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, string(buf)+string(rest))
	case strings.HasSuffix(r.URL.Path, "/page"):
		h := w.Header()
		h.Set("Content-Type", "text/html")
		h.Set("Content-Security-Policy", "default-src 'self'")
		h.Set("Service-Worker-Allowed", "/")
		h.Set("Set-Cookie", "session=planted; Path=/")
		h.Set("Clear-Site-Data", `"storage"`)
		_, _ = io.WriteString(w, "<p>page</p>")
	case strings.HasSuffix(r.URL.Path, "/cold"): // as the interceptor after a scale from zero
		w.Header().Set("X-KEDA-HTTP-Cold-Start", "true")
		_, _ = io.WriteString(w, "woken")
	case strings.HasSuffix(r.URL.Path, "/fail"):
		http.Error(w, "boom", http.StatusInternalServerError)
	default:
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(echoed{Host: r.Host, Path: r.URL.Path, RawPath: r.URL.EscapedPath(), Query: r.URL.RawQuery,
			Method: r.Method, Body: string(body), Header: r.Header})
	}
}

// deploy creates a function and writes the status a reconciler would, then waits until /fn/
// routes to it.
func (h *harness) deploy(tn tenant, name string, timeoutSec int32) string {
	h.t.Helper()
	_, err := tn.c.CreateFunction(context.Background(), tn.ns, api.CreateFunction{Name: name, FunctionFields: api.FunctionFields{
		Runtime: ptr.To("go1.23"), TimeoutSec: ptr.To(timeoutSec)}})
	if err != nil {
		h.t.Fatal(err)
	}
	host := name + "." + tn.ns + ".fn.sless.test"
	setStatus(h.t, tn.ns, name, host, true)
	h.waitRoute(tn.ns, name, func(r backend.Route) bool { return r.Host == host })
	return h.URL + "/fn/" + tn.ns + "/" + name
}

func (h *harness) waitRoute(ns, name string, ok func(backend.Route) bool) {
	h.t.Helper()
	testkit.WaitFor(h.t, "route of "+ns+"/"+name, 10*time.Second, func() bool {
		r, err := h.backend.Route(ns, name)
		return err == nil && ok(r)
	})
}

// signedFor checks that the call got reached the interceptor signed, just now, with the key
// of function ns/fn, over its method, escaped path and exactly the X-Sless-* headers in
// platform (rules.SignRequest; the wrappers check the same).
func signedFor(t *testing.T, got echoed, ns, fn string, platform http.Header) {
	t.Helper()
	for k := range got.Header {
		if strings.HasPrefix(k, "X-Sless-") && k != rules.HeaderSignature && got.Header.Get(k) != platform.Get(k) {
			t.Errorf("the function got %s: %q, want %q", k, got.Header.Get(k), platform.Get(k))
		}
	}
	sig := got.Header.Values(rules.HeaderSignature)
	var ts int64
	if len(sig) == 1 {
		ts, _ = strconv.ParseInt(strings.TrimPrefix(strings.Split(sig[0], ",")[0], "t="), 10, 64)
	}
	key := rules.FunctionKey(identityMaster, ns, fn)
	if want := rules.Signature(key, ts, got.Method, got.RawPath, platform); len(sig) != 1 || sig[0] != want || time.Since(time.Unix(ts, 0)) > time.Minute {
		t.Errorf("the function got the signature %v, want %s (one, made just now)", sig, want)
	}
}

func TestProxyForwarding(t *testing.T) {
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL})
	tn := h.tenant()
	fnURL := h.deploy(tn, "echo", 30)

	req, _ := http.NewRequest("PUT", fnURL+"/a/b%2Fc?x=1&y=two", strings.NewReader(`{"n":1}`))
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "must not pass")
	req.Header.Set("Keep-Alive", "timeout=5")
	req.Header.Set("Proxy-Authorization", "Basic eDp5")
	req.Header.Set("X-Forwarded-For", "6.6.6.6")
	req.Header.Set("X-Custom", "kept")
	req.Header.Set("Authorization", "Bearer "+tn.token)
	req.Header.Set("Cookie", "session=secret")
	req.Header.Set("X-Sless-Subject", "forged")
	req.Header.Set("X-Sless-Namespace", "forged")
	req.Header.Set("X-Sless-Signature", "t=1,v1=forged")
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	got, resp := doEcho(t, req)
	checks := []struct {
		what      string
		got, want string
	}{
		{"Host", got.Host, "echo." + tn.ns + ".fn.sless.test"},
		{"escaped path", got.RawPath, "/a/b%2Fc"},
		{"query", got.Query, "x=1&y=two"},
		{"method", got.Method, "PUT"},
		{"body", got.Body, `{"n":1}`},
		{"X-Custom", got.Header.Get("X-Custom"), "kept"},
		{"X-Hop (named by Connection)", got.Header.Get("X-Hop"), ""},
		{"Keep-Alive", got.Header.Get("Keep-Alive"), ""},
		{"Proxy-Authorization", got.Header.Get("Proxy-Authorization"), ""},
		{"Authorization (credentials stop at the gateway)", got.Header.Get("Authorization"), ""},
		{"Cookie", got.Header.Get("Cookie"), ""},
		{"X-Sless-Subject (a client's own value, public route)", got.Header.Get("X-Sless-Subject"), ""},
		{"X-Sless-Namespace", got.Header.Get("X-Sless-Namespace"), ""},
		{"response CSP on the shared origin", resp.Header.Get("Content-Security-Policy"), "sandbox allow-scripts allow-forms allow-popups allow-downloads allow-modals"},
		{"X-Forwarded-For (client's value replaced)", got.Header.Get("X-Forwarded-For"), "127.0.0.1"},
		{"X-Forwarded-Proto", got.Header.Get("X-Forwarded-Proto"), "http"},
		{"X-Forwarded-Host", got.Header.Get("X-Forwarded-Host"), strings.TrimPrefix(h.URL, "http://")},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
		}
	}
	signedFor(t, got, tn.ns, "echo", http.Header{}) // the client's X-Sless-* and signature gone
	tp := got.Header.Get("Traceparent")
	if !strings.HasPrefix(tp, "00-4bf92f3577b34da6a3ce929d0e0e4736-") || strings.Contains(tp, "00f067aa0ba902b7") {
		t.Errorf("traceparent = %q, want the caller's trace continued with the gateway's span", tp)
	}

	// No sub-path: the function sees "/".
	bare, _ := http.NewRequest("GET", fnURL, nil)
	got, _ = doEcho(t, bare)
	if got.Path != "/" || got.Header.Get("Traceparent") == "" {
		t.Fatalf("bare call: path %q traceparent %q, want / and a fresh trace", got.Path, got.Header.Get("Traceparent"))
	}
}

func TestProxyStreaming(t *testing.T) {
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL})
	tn := h.tenant()
	fnURL := h.deploy(tn, "stream", 0)

	t.Run("response", func(t *testing.T) {
		resp, err := http.Get(fnURL + "/stream-out")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		line := make(chan string, 1)
		br := bufio.NewReader(resp.Body)
		go func() { s, _ := br.ReadString('\n'); line <- s }()
		select {
		case s := <-line:
			if s != "first\n" {
				t.Fatalf("first chunk %q", s)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the first chunk did not arrive while the function was still writing: the response is buffered")
		}
		close(up.release)
		rest, _ := io.ReadAll(br)
		if string(rest) != "second\n" {
			t.Fatalf("rest %q", rest)
		}
	})
	t.Run("request", func(t *testing.T) {
		pr, pw := io.Pipe()
		done := make(chan string, 1)
		go func() {
			resp, err := http.Post(fnURL+"/stream-in", "text/plain", pr)
			if err != nil {
				done <- err.Error()
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			done <- string(b)
		}()
		_, _ = io.WriteString(pw, "part1")
		select {
		case got := <-up.started:
			if got != "part1" {
				t.Fatalf("function read %q", got)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the function did not see the first part while the caller was still sending: the request is buffered")
		}
		_, _ = io.WriteString(pw, "+part2")
		pw.Close()
		if got := <-done; got != "part1+part2" {
			t.Fatalf("echo %q", got)
		}
	})
}

// TestProxyHTTP2: a call that comes to the gateway over HTTP/2 without TLS goes on to the
// interceptor over h2c, so a gRPC answer arrives whole: its messages as they are written
// and its status in the trailers; a call over HTTP/1.1 goes on over HTTP/1.1.
func TestProxyHTTP2(t *testing.T) {
	var protos sync.Map // path -> the protocol the interceptor saw
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.Store(r.URL.Path, r.Proto)
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		for i := range 2 {
			_, _ = io.WriteString(w, "message "+strconv.Itoa(i)+"\n")
			w.(http.Flusher).Flush()
			time.Sleep(300 * time.Millisecond)
		}
		w.Header().Set("Grpc-Status", "0")
		w.Header().Set("Grpc-Message", "done")
	}))
	up.Config.Protocols = new(http.Protocols)
	up.Config.Protocols.SetHTTP1(true)
	up.Config.Protocols.SetUnencryptedHTTP2(true)
	up.Start()
	t.Cleanup(up.Close)
	h := newHarness(t, harnessOptions{interceptor: up.URL})
	fnURL := h.deploy(h.tenant(), "grpc", 30)
	// The gateway's own server takes h2c as `sless gateway` does (gateway.Server.HTTPServer).
	gw := httptest.NewUnstartedServer(h.server)
	gw.Config.Protocols = up.Config.Protocols
	gw.Start()
	t.Cleanup(gw.Close)
	fnURL = gw.URL + strings.TrimPrefix(fnURL, h.URL)

	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	for _, tc := range []struct {
		name, path, want string
		rt               http.RoundTripper
	}{
		{"h2c", "/svc/Unary", "HTTP/2.0", h2c},
		{"HTTP/1.1", "/svc/Plain", "HTTP/1.1", http.DefaultTransport},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := (&http.Client{Transport: tc.rt}).Post(fnURL+tc.path, "application/grpc", strings.NewReader("call"))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			start := time.Now()
			first, _ := br.ReadString('\n')
			firstAt := time.Since(start)
			rest, err := io.ReadAll(br)
			if first != "message 0\n" || string(rest) != "message 1\n" || err != nil {
				t.Fatalf("body %q + %q, %v", first, rest, err)
			}
			if firstAt > 250*time.Millisecond {
				t.Errorf("the first message took %v: held back until the second", firstAt)
			}
			if got, _ := protos.Load(tc.path); got != tc.want || resp.Proto != tc.want {
				t.Errorf("the interceptor saw %v, the caller got %s; want %s both", got, resp.Proto, tc.want)
			}
			if resp.Trailer.Get("Grpc-Status") != "0" || resp.Trailer.Get("Grpc-Message") != "done" {
				t.Errorf("trailers %v, want Grpc-Status 0 and Grpc-Message done", resp.Trailer)
			}
		})
	}
}

// TestColdStartIsNotTheFunctionsTimeout: the wait for an instance from zero is not counted
// against the function's timeout (its wrapper counts that from when it gets the request), so
// a cold start longer than the timeout answers, not 504.
func TestColdStartIsNotTheFunctionsTimeout(t *testing.T) {
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL, proxy: gateway.ProxyConfig{TimeoutMargin: 200 * time.Millisecond}})
	tn := h.tenant()
	limited := h.deploy(tn, "limited", 1)
	code, e, hdr := do(t, "GET", limited+"/cold", "", "", nil)
	if code != http.StatusOK || hdr.Get(rules.HeaderColdStart) != "true" {
		t.Fatalf("a 1.5 s cold start of a function with timeout 1s: %d %+v, want 200 with a cold start", code, e)
	}
}

func TestProxyTimeoutAndCancel(t *testing.T) {
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL, proxy: gateway.ProxyConfig{TimeoutMargin: 200 * time.Millisecond, ColdStartTimeout: 300 * time.Millisecond}})
	tn := h.tenant()
	limited := h.deploy(tn, "limited", 1)
	unlimited := h.deploy(tn, "unlimited", 0)

	start := time.Now()
	code, e, _ := do(t, "GET", limited+"/hang", "", "", nil)
	took := time.Since(start)
	if code != http.StatusGatewayTimeout || e.Error == "" {
		t.Fatalf("hanging function with timeout 1s: %d %+v, want 504", code, e)
	}
	if took < 1500*time.Millisecond || took > 5*time.Second {
		t.Fatalf("504 after %s, want about cold-start allowance 0.3s + timeout 1s + margin 0.2s", took)
	}
	testkit.WaitFor(t, "the upstream request to be canceled after the timeout", 3*time.Second, func() bool { return up.canceled.Load() == 1 })

	// timeout 0 = no limit; a client that goes away cancels the upstream request.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", unlimited+"/hang", nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-up.started // the timed-out request's arrival
	select {
	case <-up.started:
	case <-time.After(5 * time.Second):
		t.Fatal("request did not reach the function")
	}
	time.Sleep(1500 * time.Millisecond) // longer than the other function's timeout: no limit here
	if up.canceled.Load() != 1 {
		t.Fatal("a function with timeout 0 was cut off")
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error %v", err)
	}
	testkit.WaitFor(t, "the client's disconnect to cancel the upstream request", 3*time.Second, func() bool { return up.canceled.Load() == 2 })
}

func TestProxyHeldRequestCap(t *testing.T) {
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL, proxy: gateway.ProxyConfig{MaxHeldPerFunction: 2, MaxHeld: 3}})
	tn := h.tenant()
	a, b := h.deploy(tn, "a", 0), h.deploy(tn, "b", 0)

	var wg sync.WaitGroup
	codes := make(chan int, 3)
	hold := func(u string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _, _ := do(t, "GET", u+"/block", "", "", nil)
			codes <- code
		}()
		select {
		case <-up.started:
		case <-time.After(5 * time.Second):
			t.Fatal("held request did not reach the function")
		}
	}
	hold(a)
	hold(a)
	code, _, hdr := do(t, "GET", a+"/block", "", "", nil)
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
		t.Fatalf("third request to a: %d (Retry-After %q), want 503 with Retry-After", code, hdr.Get("Retry-After"))
	}
	hold(b) // b has its own budget, within the total of 3
	if code, _, _ := do(t, "GET", b+"/block", "", "", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("fourth request in total: %d, want 503", code)
	}
	metrics := scrape(t, h.URL)
	for _, want := range []string{"sless_gateway_fn_held_requests 3", "sless_gateway_fn_rejected_total 2",
		`sless_gateway_requests_total{code="503",handler="fn"} 2`, `sless_gateway_request_duration_seconds_count{handler="fn"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	close(up.release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Fatalf("held request ended with %d", c)
		}
	}
	if code, _, _ := do(t, "GET", a+"/echo", "", "", nil); code != 200 {
		t.Fatalf("after release: %d", code)
	}
}

func TestProxyAccess(t *testing.T) {
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL})
	alice, bob := h.tenant(), h.tenant()
	ctx := context.Background()
	public := h.deploy(alice, "public", 0)
	private := h.deploy(alice, "private", 0)
	if _, err := alice.c.CreateTrigger(ctx, alice.ns, api.CreateTrigger{Name: "private-http", TriggerFields: api.TriggerFields{
		Type: ptr.To("http"), Function: ptr.To("private"), RequireAuth: ptr.To(true)}}); err != nil {
		t.Fatal(err)
	}
	h.waitRoute(alice.ns, "private", func(r backend.Route) bool { return r.RequireAuth })
	alice.newFunction(t, "building")
	h.waitRoute(alice.ns, "building", func(backend.Route) bool { return true })

	cases := []struct {
		name, url, token string
		code             int
	}{
		{"public without token", public, "", 200},
		{"requireAuth without token", private, "", 401},
		{"requireAuth with a forged token", private, forge(t, alice.sub), 401},
		{"requireAuth with another tenant's token", private, bob.token, 403},
		{"requireAuth with the owner's token", private, alice.token, 200},
		{"unknown function", h.URL + "/fn/" + alice.ns + "/nope", "", 404},
		{"no name", h.URL + "/fn/" + alice.ns, "", 404},
		{"invalid namespace", h.URL + "/fn/NS/x", "", 404},
		{"not deployed yet", h.URL + "/fn/" + alice.ns + "/building", "", 503},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if code, _, _ := do(t, "GET", tc.url+"/echo", tc.token, "", nil); code != tc.code {
				t.Fatalf("status %d, want %d", code, tc.code)
			}
		})
	}

	// The function behind requireAuth learns who called from the gateway's own headers, never
	// from the caller's credentials or the caller's claims.
	req, _ := http.NewRequest("GET", private+"/echo", nil)
	req.Header.Set("Authorization", "bearer "+alice.token) // the scheme is case-insensitive
	req.Header.Set("X-Sless-Subject", "mallory")
	got, _ := doEcho(t, req)
	if got.Header.Get("Authorization") != "" || got.Header.Get("X-Sless-Subject") != alice.sub || got.Header.Get("X-Sless-Namespace") != alice.ns {
		t.Fatalf("function saw Authorization %q, X-Sless-Subject %q, X-Sless-Namespace %q; want none, %q, %q",
			got.Header.Get("Authorization"), got.Header.Get("X-Sless-Subject"), got.Header.Get("X-Sless-Namespace"), alice.sub, alice.ns)
	}
	// Signed with the function's key over the identity, so the function can tell it from one
	// a caller that went around the gateway wrote.
	signedFor(t, got, alice.ns, "private", http.Header{"X-Sless-Subject": {alice.sub}, "X-Sless-Namespace": {alice.ns}})
	// A bare token without the Bearer scheme is not a credential.
	req, _ = http.NewRequest("GET", private+"/echo", nil)
	req.Header.Set("Authorization", alice.token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("token without a scheme: %v %v, want 401", resp.StatusCode, err)
	}

	// Disabling the only http trigger freezes the function's URL.
	if _, err := alice.c.SetTriggerEnabled(ctx, alice.ns, "private-http", false); err != nil {
		t.Fatal(err)
	}
	h.waitRoute(alice.ns, "private", func(r backend.Route) bool { return r.Disabled })
	if code, _, _ := do(t, "GET", private+"/echo", alice.token, "", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("disabled trigger: %d, want 503", code)
	}
	if err := alice.c.DeleteFunction(ctx, alice.ns, "public"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the deleted function's route to go", 10*time.Second, func() bool {
		_, err := h.backend.Route(alice.ns, "public")
		return err != nil
	})
}

// TestProxyOrigins: on the gateway's own origin every /fn/ answer is sandboxed, cannot widen
// a service worker's scope, set cookies or clear storage, and worker fetches are refused;
// on a function host the function has an origin of its own, the whole path is its, and the
// API is not served there.
func TestProxyOrigins(t *testing.T) {
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL, functionsDomain: "fn.gateway.test"})
	tn := h.tenant()
	fnURL := h.deploy(tn, "site", 0)

	fetch := func(t *testing.T, u, host string, header map[string]string) (*http.Response, echoed) {
		t.Helper()
		resp, body := testkit.Get(t, u, host, header)
		var got echoed
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			_ = json.Unmarshal(body, &got)
		}
		return resp, got
	}

	t.Run("shared origin", func(t *testing.T) {
		resp, _ := fetch(t, fnURL+"/page", "", nil)
		if csp := resp.Header.Values("Content-Security-Policy"); len(csp) != 2 || !strings.HasPrefix(csp[0], "sandbox ") || csp[1] != "default-src 'self'" {
			t.Errorf("Content-Security-Policy = %q, want the gateway's sandbox and the function's own policy", csp)
		}
		for _, k := range []string{"Service-Worker-Allowed", "Set-Cookie", "Clear-Site-Data"} {
			if v := resp.Header.Get(k); v != "" {
				t.Errorf("%s = %q passed on the shared origin", k, v)
			}
		}
	})
	for _, tc := range []struct {
		name   string
		header map[string]string
		code   int
	}{
		{"service worker script", map[string]string{"Service-Worker": "script"}, http.StatusForbidden},
		{"script for the console's origin", map[string]string{"Sec-Fetch-Dest": "script", "Sec-Fetch-Site": "same-origin"}, http.StatusForbidden},
		{"worker for the console's origin", map[string]string{"Sec-Fetch-Dest": "worker", "Sec-Fetch-Site": "same-origin"}, http.StatusForbidden},
		{"script of a sandboxed page (opaque origin)", map[string]string{"Sec-Fetch-Dest": "script", "Sec-Fetch-Site": "cross-site"}, http.StatusOK},
		{"document", map[string]string{"Sec-Fetch-Dest": "document", "Sec-Fetch-Site": "same-origin"}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if resp, _ := fetch(t, fnURL+"/app.js", "", tc.header); resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.code)
			}
		})
	}

	host := "site." + tn.ns + ".fn.gateway.test"
	t.Run("function host", func(t *testing.T) {
		resp, got := fetch(t, h.URL+"/v1/whoami?x=1", host+":8080", map[string]string{"Authorization": "Bearer " + tn.token, "Service-Worker": "script"})
		if resp.StatusCode != 200 || got.Path != "/v1/whoami" || got.Query != "x=1" || got.Host != "site."+tn.ns+".fn.sless.test" {
			t.Fatalf("function host: %d, function saw path %q query %q host %q; want the function serving /v1/whoami itself", resp.StatusCode, got.Path, got.Query, got.Host)
		}
		if got.Header.Get("Authorization") != "" || resp.Header.Get("Content-Security-Policy") != "" {
			t.Errorf("function host: Authorization %q reached the function, CSP %q added", got.Header.Get("Authorization"), resp.Header.Get("Content-Security-Policy"))
		}
		resp, _ = fetch(t, h.URL+"/page", host, nil)
		if resp.Header.Get("Set-Cookie") == "" || resp.Header.Get("Service-Worker-Allowed") != "/" {
			t.Errorf("function host: the function's own Set-Cookie %q / Service-Worker-Allowed %q dropped", resp.Header.Get("Set-Cookie"), resp.Header.Get("Service-Worker-Allowed"))
		}
	})
	t.Run("unknown function host", func(t *testing.T) {
		if resp, _ := fetch(t, h.URL+"/", "nope."+tn.ns+".fn.gateway.test", nil); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("status %d, want 404", resp.StatusCode)
		}
	})
	t.Run("API and console headers", func(t *testing.T) {
		for _, path := range []string{"/v1/openapi.yaml", "/console/"} {
			resp, _ := fetch(t, h.URL+path, "", nil)
			if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" ||
				!strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
				t.Errorf("%s: headers %v, want no framing and no sniffing", path, resp.Header)
			}
		}
	})
}

// TestProxyColdStart: the interceptor's cold-start header becomes X-Sless-Cold-Start, in
// the answer and in the history; an answer without it is a warm one.
func TestProxyColdStart(t *testing.T) {
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL})
	tn := h.tenant()
	fnURL := h.deploy(tn, "sleeper", 0)
	for _, tc := range []struct{ path, want string }{{"/cold", "true"}, {"/warm", "false"}} {
		resp, err := http.Get(fnURL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Sless-Cold-Start"); got != tc.want || resp.Header.Get("X-KEDA-HTTP-Cold-Start") != "" {
			t.Fatalf("%s: X-Sless-Cold-Start %q (want %q), interceptor header %q", tc.path, got, tc.want, resp.Header.Get("X-KEDA-HTTP-Cold-Start"))
		}
	}
	var page api.Invocations
	testkit.WaitFor(t, "two records", 10*time.Second, func() bool {
		page, _ = tn.c.ListInvocations(context.Background(), tn.ns, "sleeper", 10, "")
		return len(page.Invocations) == 2
	})
	if !page.Invocations[1].ColdStart || page.Invocations[0].ColdStart { // newest first
		t.Fatalf("cold_start in the history: %+v", page.Invocations)
	}
}

// TestProxyInterceptorDown answers 502 with a JSON error when nothing listens at the
// interceptor address, and records the failed invocation.
func TestProxyInterceptorDown(t *testing.T) {
	h := newHarness(t, harnessOptions{interceptor: "http://" + testkit.FreeAddr(t)})
	tn := h.tenant()
	fnURL := h.deploy(tn, "orphan", 0)
	for range 3 {
		code, e, _ := do(t, "POST", fnURL, "", "application/json", strings.NewReader(`{}`))
		if code != http.StatusBadGateway || !strings.Contains(e.Error, "could not be reached") {
			t.Fatalf("%d %+v, want 502", code, e)
		}
	}
	testkit.WaitFor(t, "3 failed invocations recorded", 10*time.Second, func() bool { return pgtest.CountInvocations(t, h.dbURL, "WHERE namespace = $1", tn.ns) == 3 })
}

// TestLogsWithoutPods: the logs of a function or job with no pod (yet, or any more) are an
// empty stream; an unknown object is a 404 and another tenant's a 403. (The lines
// themselves come from pods/log, which needs a kubelet: test/e2e reads them.)
func TestLogsWithoutPods(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tn, other := h.tenant(), h.tenant()
	h.deploy(tn, "quiet", 0)
	base := h.URL + "/v1/namespaces/" + tn.ns
	for _, tc := range []struct {
		path, token string
		code        int
	}{
		{"/functions/quiet/logs", tn.token, 200},
		{"/functions/quiet/logs?follow=false&tail=5", tn.token, 200},
		{"/functions/quiet/builds/latest/logs", tn.token, 200},
		{"/functions/nope/logs", tn.token, 404},
		{"/jobs/nope/logs", tn.token, 404},
		{"/functions/quiet/logs", other.token, 403},
	} {
		code, _, hdr := do(t, "GET", base+tc.path, tc.token, "", nil)
		if code != tc.code || (code == 200 && hdr.Get("Content-Type") != "application/x-ndjson") {
			t.Errorf("GET %s: %d %s, want %d", tc.path, code, hdr.Get("Content-Type"), tc.code)
		}
	}
}

func TestScanLog(t *testing.T) {
	var got []string
	in := "2026-12-01T10:00:00.123456789Z hello world\n2026-12-01T10:00:01Z  two spaces\nno time here\n"
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-1", Labels: map[string]string{scaling.LabelRevision: "hello-3"}}}
	if err := cluster.ScanLog(strings.NewReader(in), pod, func(l api.LogLine) error {
		if l.Revision != "hello-3" {
			t.Errorf("line %q of revision %q", l.Line, l.Revision)
		}
		got = append(got, l.Time.Format(time.RFC3339Nano)+"|"+l.Instance+"|"+l.Line)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"2026-12-01T10:00:00.123456789Z|pod-1|hello world", "2026-12-01T10:00:01Z|pod-1| two spaces"}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || !strings.HasSuffix(got[2], "|pod-1|no time here") {
		t.Fatalf("got %q", got)
	}
}

// TestProxyRoutesByRevisionTraffic: the gateway splits /fn/ calls by the traffic the
// operator resolved, calling each revision's host on the interceptor (its routing domain
// read off the function's host); a tag reaches only its revision, and every answer names
// the revision that served it.
func TestProxyRoutesByRevisionTraffic(t *testing.T) {
	up := newUpstream(t)
	h := newHarness(t, harnessOptions{interceptor: up.URL})
	tn := h.tenant()
	fnURL := h.deploy(tn, "split", 0)
	setTraffic(t, tn.ns, "split", v1alpha1.ResolvedTrafficTarget{Revision: "split-1", Percent: 50},
		v1alpha1.ResolvedTrafficTarget{Revision: "split-2", Latest: true, Percent: 50, Tag: "canary"})
	hosts := map[string]string{"split-1": "split-1." + tn.ns + ".rev.fn.sless.test", "split-2": "split-2." + tn.ns + ".rev.fn.sless.test"}
	call := func(tag string) (host, revision string) {
		t.Helper()
		req, _ := http.NewRequest("GET", fnURL, nil)
		if tag != "" {
			req.Header.Set(rules.HeaderTag, tag)
		}
		got, resp := doEcho(t, req)
		return got.Host, resp.Header.Get(rules.HeaderRevision)
	}
	var seen map[string]int
	deadline := time.Now().Add(10 * time.Second)
	for len(seen) < 2 && time.Now().Before(deadline) { // the route table follows the status
		seen = map[string]int{}
		for range 40 {
			host, rev := call("")
			if rev == "" { // not yet: the function's own host, until the informer brings the traffic
				seen = nil
				time.Sleep(50 * time.Millisecond)
				break
			}
			if hosts[rev] != host {
				t.Fatalf("revision %q answered from host %q", rev, host)
			}
			seen[rev]++
		}
	}
	if seen["split-1"] == 0 || seen["split-2"] == 0 {
		t.Fatalf("a 50/50 split served %v", seen)
	}
	for range 10 {
		if host, rev := call("canary"); rev != "split-2" || host != hosts["split-2"] {
			t.Fatalf("tag canary reached %s on %s", rev, host)
		}
	}
}
