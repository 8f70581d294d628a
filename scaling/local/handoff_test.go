package local

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// connPair returns both ends of a new loopback TCP connection.
func connPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client, server
}

// handoffPool is a pool whose processes take handed-off connections (the gateway URL is
// never reached: these tests call the function's own prefix only).
func handoffPool(t *testing.T, opts Options) *Pool {
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	opts.Tick, opts.GatewayURL = 20*time.Millisecond, "http://127.0.0.1:9"
	p := New(opts)
	t.Cleanup(p.Close)
	return p
}

// handedConn hands a new connection to key's function and returns the client's end.
func handedConn(t *testing.T, p *Pool, key string) net.Conn {
	t.Helper()
	c, s := connPair(t)
	if err := p.HandOff(key, s, nil); err != nil {
		t.Fatalf("HandOff %s: %v", key, err)
	}
	return c
}

// post sends body to key's function through the pool (the gateway path).
func post(p *Pool, key, body string) error {
	req, _ := http.NewRequest(http.MethodPost, "http://"+key+"/", strings.NewReader(body))
	resp, err := p.RoundTrip(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// postOn sends body to /fn/ns/fn<path> on a handed-off connection and reads the answer.
func postOn(c net.Conn, path, body string) (*http.Response, error) {
	if _, err := fmt.Fprintf(c, "POST /fn/ns/fn%s HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s", path, len(body), body); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		resp.Body.Close()
	}
	return resp, err
}

// TestHandOffCapsAtTargetAndReports: a process takes at most Target connections; a closed
// connection frees its place; direct invocations reach OnDirect; functions without a
// DirectPrefix and unknown ones take none.
func TestHandOffCapsAtTargetAndReports(t *testing.T) {
	var mu sync.Mutex
	var direct []DirectInvocation
	p := handoffPool(t, Options{StopGrace: 2 * time.Second,
		OnDirect: func(key string, inv DirectInvocation) {
			mu.Lock()
			defer mu.Unlock()
			if key == "fn" {
				direct = append(direct, inv)
			}
		}})
	spec := Spec{Artifact: sharedArtifact(t), MinProcs: 1, MaxProcs: 1, Target: 1, ScaleDown: time.Minute, DirectPrefix: "/fn/ns/fn"}
	if err := p.Set("fn", spec); err != nil {
		t.Fatal(err)
	}
	spec.DirectPrefix = ""
	if err := p.Set("plain", spec); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "warm processes", 30*time.Second, func() bool { return p.Stats("fn").Ready == 1 && p.Stats("plain").Ready == 1 })

	c1 := handedConn(t, p, "fn")
	if resp, err := postOn(c1, "/x", "{}"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("request on the handed-off connection: %v %v", resp, err)
	}

	c2, s2 := connPair(t)
	if err := p.HandOff("fn", s2, nil); !errors.Is(err, ErrNoHandoff) {
		t.Fatalf("second connection with target 1: want ErrNoHandoff, got %v", err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c2.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a refused connection must be closed: read %d, %v", n, err)
	}
	for _, key := range []string{"plain", "missing"} {
		_, s := connPair(t)
		if err := p.HandOff(key, s, nil); err == nil {
			t.Fatalf("%s: handoff must fail", key)
		}
	}

	c1.Close()
	waitFor(t, "the closed connection to free its place", 5*time.Second, func() bool { return p.CanHandOff("fn") })
	if s := p.Stats("fn"); s.Direct != 0 || s.InFlight != 0 {
		t.Fatalf("after the close: %+v", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(direct) != 1 || direct[0].Method != http.MethodPost || direct[0].Path != "/x" || direct[0].Status != http.StatusOK ||
		time.Since(direct[0].Start) > time.Minute || direct[0].Duration <= 0 {
		t.Fatalf("OnDirect: %+v", direct)
	}
	if !strings.HasPrefix(p.Stats("fn").Addrs[0], "127.0.0.1:") {
		t.Fatal("the process must still serve its port")
	}
}

// TestValidDirectPrefix: prefixes the wrappers match literally.
func TestValidDirectPrefix(t *testing.T) {
	for prefix, ok := range map[string]bool{
		"": true, "/fn/ns/fn": true, "fn/ns/fn": false, "/fn/ns/fn/": false, "/fn/ns/fn?x": false, "/fn/n s/fn": false,
	} {
		if err := validDirectPrefix(prefix); (err == nil) != ok {
			t.Errorf("validDirectPrefix(%q) = %v, want ok=%v", prefix, err, ok)
		}
	}
}

// TestLongDirectRequestKeepsProcess: a direct invocation longer than the scale-down period
// keeps its process (the wrapper's busy heartbeat), which scales down once it is answered.
func TestLongDirectRequestKeepsProcess(t *testing.T) {
	p := handoffPool(t, Options{StopGrace: 100 * time.Millisecond})
	if err := p.Set("fn", Spec{Artifact: sharedArtifact(t), MaxProcs: 1, Target: 10, ScaleDown: 300 * time.Millisecond, DirectPrefix: "/fn/ns/fn"}); err != nil {
		t.Fatal(err)
	}
	if err := post(p, "fn", `{}`); err != nil { // a cold start through the pool, then the connection
		t.Fatal(err)
	}
	pid := p.Stats("fn").PIDs[0]
	c := handedConn(t, p, "fn")
	if resp, err := postOn(c, "", `{"sleep": 1.2}`); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a direct request four times the scale-down period: %v %v", resp, err)
	}
	if got := p.Stats("fn").PIDs; len(got) != 1 || got[0] != pid {
		t.Fatalf("the process must have stayed: had %d, now %v", pid, got)
	}
	waitFor(t, "scale to zero after the answer", 5*time.Second, func() bool { return p.Stats("fn").Processes == 0 && !alive(pid) })
}

// TestParseDirect: the lines of the three wrappers, and output that is not theirs.
func TestParseDirect(t *testing.T) {
	cases := []struct {
		name, line string
		want       directLine
		ok         bool
	}{
		{"go", `{"time":"2026-11-29T17:00:00.1Z","level":"INFO","msg":"invocation","method":"POST","path":"/a/b","status":200,"duration_ms":0,"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","direct":true,"start_us":1790000000000001,"duration_us":35,"active":2}`,
			directLine{Msg: "invocation", Direct: true, Active: 2, Method: "POST", Path: "/a/b", Status: 200, StartUS: 1790000000000001, DurationUS: 35, Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, true},
		{"python", `{"time": "2026-11-29T17:00:00Z", "level": "info", "msg": "invocation", "method": "GET", "path": "/", "status": 504, "duration_ms": 1000, "traceparent": "", "start_us": 1, "duration_us": 1000001, "direct": true, "active": 0}`,
			directLine{Msg: "invocation", Direct: true, Method: "GET", Path: "/", Status: 504, StartUS: 1, DurationUS: 1000001}, true},
		{"node busy", `{"time":"2026-11-29T17:00:00.000Z","level":"info","msg":"direct busy","direct":true,"active":3}`,
			directLine{Msg: "direct busy", Direct: true, Active: 3}, true},
		{"escaped path takes encoding/json", `{"msg":"invocation","path":"/a\"b\u00e9","direct":true,"active":1}`,
			directLine{Msg: "invocation", Path: `/a"bé`, Direct: true, Active: 1}, true},
		{"not direct", `{"msg":"invocation","direct":false,"active":1}`, directLine{}, false},
		{"an invocation line of the gateway path", `{"msg":"invocation","method":"POST","status":200}`, directLine{}, false},
		{"the function's own text", `direct hit: "direct" was printed`, directLine{}, false},
		{"nested value", `{"msg":"x","direct":true,"extra":{"a":1}}`, directLine{Msg: "x", Direct: true}, true},
		{"bad number", `{"msg":"invocation","direct":true,"active":"many"}`, directLine{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseDirect([]byte(tc.line))
			if ok != tc.ok || (ok && got != tc.want) {
				t.Fatalf("parseDirect = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// FuzzParseDirect: function output is arbitrary; parseDirect never panics and, on valid
// JSON, agrees with encoding/json.
func FuzzParseDirect(f *testing.F) {
	for _, s := range []string{
		`{"msg":"invocation","method":"POST","path":"/","status":200,"direct":true,"start_us":1,"duration_us":2,"active":0}`,
		`{"time": "x", "msg": "direct busy", "direct": true, "active": 1}`,
		`{"direct":true,"active":1e3}`, `{"Direct":true}`, `{"direct":true,"path":"\u212a"}`, `"direct"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		got, ok := parseDirect(line)
		if !json.Valid(line) || !bytes.Contains(line, []byte(`"direct"`)) {
			return
		}
		var want directLine
		err := json.Unmarshal(line, &want)
		if wantOK := err == nil && want.Direct; ok != wantOK || (ok && got != want) {
			t.Fatalf("parseDirect(%q) = %+v, %v; encoding/json: %+v, %v", line, got, ok, want, err)
		}
	})
}

// BenchmarkParseDirect: one direct line per request passes through parseDirect; the
// encoding/json sub-benchmark is the baseline it replaced, measured in the same run.
func BenchmarkParseDirect(b *testing.B) {
	line := []byte(`{"time":"2026-11-29T17:00:00.000Z","level":"info","msg":"invocation","method":"POST","path":"/","status":200,"duration_ms":0,"traceparent":"","direct":true,"start_us":1790000000000000,"duration_us":35,"active":0}`)
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			if _, ok := parseDirect(line); !ok {
				b.Fatal("not parsed")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var d directLine
			if json.Unmarshal(line, &d) != nil || !d.Direct {
				b.Fatal("not parsed")
			}
		}
	})
}

// TestStopClosesIdleHandedConnectionsFirst: a stopping process closes its idle handed-off
// connections at once, while it still drains a running request, so a client learns of the
// close before it can send into the exit.
func TestStopClosesIdleHandedConnectionsFirst(t *testing.T) {
	p := handoffPool(t, Options{StopGrace: 10 * time.Second})
	if err := p.Set("fn", Spec{Artifact: sharedArtifact(t), MaxProcs: 1, Target: 10, ScaleDown: time.Minute, DirectPrefix: "/fn/ns/fn"}); err != nil {
		t.Fatal(err)
	}
	if err := post(p, "fn", `{}`); err != nil {
		t.Fatal(err)
	}
	long := make(chan error, 1)
	go func() { long <- post(p, "fn", `{"sleep": 2}`) }()
	waitFor(t, "the long request in flight", 30*time.Second, func() bool { return p.Stats("fn").InFlight == 1 })
	time.Sleep(200 * time.Millisecond) // forwarded is not yet read: let the handler start sleeping
	c := handedConn(t, p, "fn")
	waitFor(t, "the handed connection to be served", 5*time.Second, func() bool { return p.Stats("fn").Direct == 1 })
	go p.Remove("fn") // SIGTERM; the process drains the long request
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the idle handed connection must be closed")
	}
	select {
	case err := <-long:
		t.Fatalf("the idle connection was closed only after the long request ended (%v)", err)
	default:
	}
	if err := <-long; err != nil {
		t.Fatalf("the running request must be answered during the drain: %v", err)
	}
}
