package dispatcher_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testkit"
)

// connServer is a function server that counts the connections it accepted and can close them
// all, as a server's idle timeout would.
type connServer struct {
	*httptest.Server
	accepted atomic.Int64
	mu       sync.Mutex
	conns    map[net.Conn]bool
}

func newConnServer(t *testing.T, h http.HandlerFunc) *connServer {
	s := &connServer{conns: map[net.Conn]bool{}}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(c net.Conn, st http.ConnState) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch st {
		case http.StateNew:
			s.accepted.Add(1)
			s.conns[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(s.conns, c)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func (s *connServer) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
}

// newInvoker serves h on a connServer and returns it with an HTTPInvoker of conns
// connections calling it.
func newInvoker(t *testing.T, conns int, h http.HandlerFunc) (*connServer, *dispatcher.HTTPInvoker) {
	t.Helper()
	s := newConnServer(t, h)
	inv, err := dispatcher.NewHTTPInvoker(s.URL, "", conns)
	if err != nil {
		t.Fatal(err)
	}
	return s, inv
}

func invoke(t *testing.T, inv *dispatcher.HTTPInvoker, body string, h http.Header) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if h == nil {
		h = http.Header{}
	}
	res, err := inv.Invoke(ctx, dispatcher.Call{Body: []byte(body), Header: h})
	return res.Status, err
}

// TestHTTPInvoker covers what the dispatcher's own HTTP/1.1 client must get right against a
// real net/http server: framing of every kind of answer, connection reuse, stale
// connections, error snippets and cancellation.
func TestHTTPInvoker(t *testing.T) {
	t.Run("posts body, headers and host; reuses one connection", func(t *testing.T) {
		var got atomic.Value
		s := newConnServer(t, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got.Store(r.Method + " " + r.Host + " " + r.URL.RequestURI() + " " + r.Header.Get("X-Amqp-Message-Id") + " " + r.Header.Get("Content-Type") + " " + string(b))
			_, _ = w.Write([]byte(`{"ok":true}`))
		})
		inv, err := dispatcher.NewHTTPInvoker(s.URL+"/fn/team-a/resize?x=1", "resize.team-a.fn.example", 4)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			h := http.Header{"X-Amqp-Message-Id": {"m1"}, "Content-Type": {"application/json"}}
			if status, err := invoke(t, inv, `{"n":1}`, h); err != nil || status != 200 {
				t.Fatalf("call %d: status %d, %v", i, status, err)
			}
		}
		want := `POST resize.team-a.fn.example /fn/team-a/resize?x=1 m1 application/json {"n":1}`
		if g := got.Load(); g != want {
			t.Fatalf("server saw %q, want %q", g, want)
		}
		if n := s.accepted.Load(); n != 1 {
			t.Fatalf("%d connections for 50 sequential calls, want 1 kept alive", n)
		}
	})

	t.Run("the backend's cold-start header is reported", func(t *testing.T) {
		var cold atomic.Bool
		_, inv := newInvoker(t, 1, func(w http.ResponseWriter, r *http.Request) {
			if cold.Load() {
				w.Header().Set("X-KEDA-HTTP-Cold-Start", "true")
			}
		})
		for _, want := range []bool{false, true} {
			cold.Store(want)
			res, err := inv.Invoke(context.Background(), dispatcher.Call{Body: []byte(`{}`), Header: http.Header{}})
			if err != nil || res.ColdStart != want || res.Status != 200 {
				t.Fatalf("cold start %v: got %+v, %v", want, res, err)
			}
		}
	})

	t.Run("non-2xx answers are errors with the body's first bytes", func(t *testing.T) {
		s, inv := newInvoker(t, 1, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "bad order "+strings.Repeat("x", 5000), http.StatusUnprocessableEntity)
		})
		for range 2 {
			status, err := invoke(t, inv, `{}`, nil)
			var fe *dispatcher.FunctionError
			if status != 422 || !errors.As(err, &fe) || !strings.HasPrefix(fe.Body, "bad order xxx") || len(fe.Body) > 1024 {
				t.Fatalf("status %d, error %v", status, err)
			}
		}
		if n := s.accepted.Load(); n != 1 {
			t.Fatalf("an error answer closed the connection (%d connections)", n)
		}
	})

	t.Run("chunked, empty, large and connection-close answers", func(t *testing.T) {
		var calls atomic.Int64
		s, inv := newInvoker(t, 1, func(w http.ResponseWriter, r *http.Request) {
			switch calls.Add(1) % 4 {
			case 0: // chunked: flushed before the end
				_, _ = w.Write([]byte("part one "))
				w.(http.Flusher).Flush()
				_, _ = w.Write([]byte("part two"))
			case 1:
				w.WriteHeader(http.StatusNoContent)
			case 2: // over the 1 MiB the client reads: the connection is dropped, not misread
				_, _ = w.Write([]byte(strings.Repeat("y", 3<<20)))
			case 3:
				w.Header().Set("Connection", "close")
				_, _ = w.Write([]byte("bye"))
			}
		})
		for i := range 12 {
			if status, err := invoke(t, inv, `{}`, nil); err != nil || status/100 != 2 {
				t.Fatalf("call %d: status %d, %v", i, status, err)
			}
		}
		if n := s.accepted.Load(); n < 2 || n > 7 {
			t.Fatalf("%d connections for 12 calls", n)
		}
	})

	t.Run("connections the server closed while idle are replaced without a failed call", func(t *testing.T) {
		var calls atomic.Int64
		s, inv := newInvoker(t, 2, func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			_, _ = w.Write([]byte(`{}`))
		})
		for i := range 5 {
			if status, err := invoke(t, inv, `{}`, nil); err != nil || status != 200 {
				t.Fatalf("call %d: status %d, %v", i, status, err)
			}
			s.closeConns()
			time.Sleep(20 * time.Millisecond)
		}
		if calls.Load() != 5 {
			t.Fatalf("handler ran %d times for 5 calls", calls.Load())
		}
	})

	t.Run("cancellation ends a call to a function that never answers", func(t *testing.T) {
		release := make(chan struct{})
		_, inv := newInvoker(t, 1, func(w http.ResponseWriter, r *http.Request) { <-release })
		defer close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := inv.Invoke(ctx, dispatcher.Call{Body: []byte(`{}`), Header: http.Header{}})
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
			t.Fatalf("error %v after %s", err, time.Since(start))
		}
	})

	t.Run("nothing listening is an error naming the target", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := ln.Addr().String()
		ln.Close()
		inv, _ := dispatcher.NewHTTPInvoker("http://"+addr+"/", "", 1)
		if _, err := invoke(t, inv, `{}`, nil); err == nil || !strings.Contains(err.Error(), addr) {
			t.Fatalf("error %v", err)
		}
	})

	t.Run("a header that would break the request is refused", func(t *testing.T) {
		s, inv := newInvoker(t, 1, func(w http.ResponseWriter, r *http.Request) {})
		if _, err := invoke(t, inv, `{}`, http.Header{"X-Evil": {"a\r\nInjected: 1"}}); err == nil {
			t.Fatal("accepted a header value with CRLF")
		}
		if s.accepted.Load() != 0 {
			t.Fatal("a refused request reached the server")
		}
	})
}

// TestHTTPInvokerTargets: with the function's revisions as targets each call goes to one of
// them by weight, with its host, and records that revision whatever the function answers in
// X-Sless-Revision.
func TestHTTPInvokerTargets(t *testing.T) {
	var mu sync.Mutex
	hosts := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts[r.Host]++
		mu.Unlock()
		w.Header().Set("X-Sless-Revision", "forged-9")
	}))
	defer srv.Close()
	inv, err := dispatcher.NewHTTPInvoker(srv.URL, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"hello-1.ns.rev.fn.test=75", "hello-2.ns.rev.fn.test=25"} {
		target, err := dispatcher.ParseTarget(s)
		if err != nil {
			t.Fatal(err)
		}
		inv.Targets = append(inv.Targets, target)
	}
	revs := map[string]int{}
	for range 400 {
		res, err := inv.Invoke(context.Background(), dispatcher.Call{Body: []byte("{}")})
		if err != nil {
			t.Fatal(err)
		}
		revs[res.Revision]++
	}
	// 400 draws at 25 %: 100 expected, the 99.9 % bound is about ±29.
	if revs["hello-1"]+revs["hello-2"] != 400 || revs["hello-2"] < 70 || revs["hello-2"] > 130 {
		t.Errorf("revisions %v", revs)
	}
	if hosts["hello-1.ns.rev.fn.test"] != revs["hello-1"] || hosts["hello-2.ns.rev.fn.test"] != revs["hello-2"] {
		t.Errorf("hosts %v for revisions %v", hosts, revs)
	}
}

func TestParseTarget(t *testing.T) {
	for _, bad := range []string{"", "hello-1.ns.rev.fn.test", "hello.ns.fn.test=50", "hello-1.ns.rev.fn.test=101", "hello-1.ns.rev.fn.test=-1", "hello-1.ns=x"} {
		if _, err := dispatcher.ParseTarget(bad); err == nil || !strings.Contains(err.Error(), "<revision host>=<percent>") {
			t.Errorf("ParseTarget(%q) = %v", bad, err)
		}
	}
	got, err := dispatcher.ParseTarget("fn-a-12.ns.rev.d=40")
	if err != nil || got != (dispatcher.Target{Revision: "fn-a-12", Host: "fn-a-12.ns.rev.d", Percent: 40}) {
		t.Errorf("ParseTarget = %+v, %v", got, err)
	}
}

// testKey is the key of the function the dispatchers' tests invoke.
var testKey = rules.FunctionKey([]byte("dispatcher-test-master"), "ns", "fn")

// TestHTTPInvokerSigns: with the function's key, every call goes out signed over what the
// function receives — an event's or cron tick's trigger headers, an asynchronous replay's
// method, escaped path and the caller's identity the gateway queued — each attempt anew.
func TestHTTPInvokerSigns(t *testing.T) {
	var got atomic.Value
	_, inv := newInvoker(t, 1, func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Clone(context.Background()))
	})
	inv.Key = testKey
	for _, c := range []dispatcher.Call{
		{Header: http.Header{"X-Sless-Trigger-Kind": {"cron"}, "X-Sless-Schedule": {"*/5 * * * *"}, "X-Sless-Attempt": {"1"}}},
		{Header: http.Header{"X-Sless-Trigger-Kind": {"cron"}, "X-Sless-Schedule": {"*/5 * * * *"}, "X-Sless-Attempt": {"2"}}},
		{Method: http.MethodPut, Path: "/a%20b/x%2Fy", RawQuery: "q=1",
			Header: http.Header{"X-Sless-Subject": {"alice"}, "X-Sless-Namespace": {"ns"}, "X-Sless-Attempt": {"3"}, "Content-Type": {"text/plain"}}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := inv.Invoke(ctx, c)
		cancel()
		r, _ := got.Load().(*http.Request)
		if err != nil || r == nil || !testkit.SignedWith(r, testKey) {
			t.Fatalf("call %+v: %v; the function got %v, not signed with its key", c, err, r.Header)
		}
		if testkit.SignedWith(r, rules.FunctionKey([]byte("dispatcher-test-master"), "ns", "other")) {
			t.Fatal("the signature also holds for another function")
		}
	}
}
