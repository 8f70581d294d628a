package local_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sless.dev/sless/gateway/api"
)

// echoFunctions answer with what the wrapper passed them, in each runtime.
var echoFunctions = []struct {
	runtime string
	files   map[string]string
}{
	{"go1.25", map[string]string{"handler.go": `package handler

func Handle(event, request map[string]interface{}) interface{} {
	headers, _ := request["headers"].(map[string]interface{})
	return map[string]interface{}{"path": request["path"], "query": request["query"],
		"traceparent": request["traceparent"], "xff": headers["x-forwarded-for"], "event": event}
}
`}},
	{"python3.11", map[string]string{"handler.py": `def handle(event, request):
    return {"path": request["path"], "query": request["query"], "traceparent": request["traceparent"],
            "xff": request["headers"].get("x-forwarded-for"), "event": event}
`}},
	{"nodejs20", map[string]string{"handler.js": `exports.handle = (event, request) => ({
  path: request.path, query: request.query, traceparent: request.traceparent,
  xff: request.headers['x-forwarded-for'], event,
});
`}},
}

type echoReply struct {
	Path        string            `json:"path"`
	Query       map[string]string `json:"query"`
	Traceparent string            `json:"traceparent"`
	XFF         string            `json:"xff"`
	Event       map[string]any    `json:"event"`
}

const clientTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// oneConnClient is a keep-alive client that uses a single connection and counts its dials.
func oneConnClient(t *testing.T) (*http.Client, *atomic.Int32) {
	var dials atomic.Int32
	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, &dials
}

func (d *dev) echo(t *testing.T, hc *http.Client, path string, n int) echoReply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.endpoint+path, strings.NewReader(fmt.Sprintf(`{"n":%d}`, n)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Traceparent", clientTraceparent)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r echoReply
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &r) != nil {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, body)
	}
	if got := r.Event["n"]; got != float64(n) {
		t.Fatalf("POST %s: event %v, want n=%d", path, r.Event, n)
	}
	return r
}

// TestHandoff: after the first request of a keep-alive connection the function process
// serves the connection itself: later requests never reach the gateway, see the same path,
// query and forwarded headers, and are recorded in the history once each; other paths on
// the connection are proxied back to the gateway; bytes the gateway had already read are
// not lost; the process still scales to zero and the client reconnects through the gateway.
func TestHandoff(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	d.deploy("other", "python3.11", map[string]string{"handler.py": steerable}, api.FunctionFields{})
	for _, fn := range echoFunctions {
		t.Run(fn.runtime, func(t *testing.T) {
			name := "echo-" + strings.TrimRight(fn.runtime, "0123456789.")
			d.deploy(name, fn.runtime, fn.files, api.FunctionFields{ScaleDownPeriodSec: ptr[int32](2)})
			base := "/fn/" + d.ns + "/" + name
			hc, dials := oneConnClient(t)

			// Go's wrapper unescapes the path, Python and Node pass it raw: whatever the
			// gateway path gives, the direct one must give too.
			first := d.echo(t, hc, base+"/a%2Fb/c?x=0", 0)
			if (first.Path != "/a/b/c" && first.Path != "/a%2Fb/c") || first.Query["x"] != "0" {
				t.Fatalf("through the gateway: %+v", first)
			}
			waitFor(t, "the connection to be handed to the process", 5*time.Second, func() bool { return d.stats(name).Direct == 1 })
			before := d.served.Load()
			const direct = 20
			for i := 1; i <= direct; i++ {
				r := d.echo(t, hc, base+"/a%2Fb/c?x="+strconv.Itoa(i), i)
				if r.Path != first.Path || r.Query["x"] != strconv.Itoa(i) || r.Traceparent != clientTraceparent || r.XFF != "127.0.0.1" {
					t.Fatalf("direct request %d: %+v", i, r)
				}
			}
			if r := d.echo(t, hc, base, direct+1); r.Path != "/" {
				t.Fatalf("the function's root: path %q, want /", r.Path)
			}
			if n := d.served.Load() - before; n != 0 {
				t.Fatalf("%d requests on the handed-off connection reached the gateway", n)
			}

			// Other paths on the same connection: the API and another function.
			req, _ := http.NewRequest(http.MethodGet, d.endpoint+"/v1/namespaces/"+d.ns+"/functions/"+name, nil)
			req.Header.Set("Authorization", "Bearer "+d.token)
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"name":"`+name+`"`) {
				t.Fatalf("API through the handed-off connection: %d %s", resp.StatusCode, body)
			}
			resp, err = hc.Post(d.endpoint+"/fn/"+d.ns+"/other", "application/json", strings.NewReader(`{"name":"neighbour"}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"hello":"neighbour"`) {
				t.Fatalf("another function through the handed-off connection: %d %s", resp.StatusCode, body)
			}
			if n := d.served.Load() - before; n != 2 {
				t.Fatalf("the two other requests must reach the gateway once each, got %d", n)
			}
			if n := dials.Load(); n != 1 {
				t.Fatalf("everything must run on one connection, dialled %d", n)
			}

			// Every invocation is recorded once: the gateway's first, the process's direct ones.
			want := 1 + direct + 1
			var invs []api.Invocation
			waitFor(t, "the direct invocations in the history", 5*time.Second, func() bool {
				invs = d.invocations(name)
				return len(invs) >= want
			})
			traced := 0
			for _, inv := range invs {
				if inv.Kind != "http" || inv.HTTPStatus != http.StatusOK || inv.Status != "succeeded" {
					t.Fatalf("record %+v", inv)
				}
				if inv.TraceID == "0af7651916cd43dd8448eb211c80319c" {
					traced++
				}
			}
			if len(invs) != want || traced < direct+1 {
				t.Fatalf("want %d records, %d of them with the client's trace ID; got %d records, %d traced", want, direct+1, len(invs), traced)
			}

			testBufferedBytes(t, d, name, base)

			// Scale to zero closes the connection; the client reconnects through the gateway.
			pids := d.stats(name).PIDs
			waitFor(t, "scale to zero with a handed-off connection open", 15*time.Second, func() bool {
				return d.stats(name).Processes == 0 && !alive(pids[0])
			})
			if r := d.echo(t, hc, base+"/again", 99); r.Path != "/again" {
				t.Fatalf("after scale to zero: %+v", r)
			}
			if n := dials.Load(); n != 2 {
				t.Fatalf("want one new connection after scale to zero, dialled %d in all", n)
			}
		})
	}
}

// testBufferedBytes hands connections over with the start of the next request already
// read by the gateway (one byte, as after its background read, and a whole request).
func testBufferedBytes(t *testing.T, d *dev, name, base string) {
	host := name + "." + d.ns + ".fn.sless.local"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	request := func(n int) string {
		body := fmt.Sprintf(`{"n":%d}`, n)
		return fmt.Sprintf("POST %s/buffered?n=%d HTTP/1.1\r\nHost: sless\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", base, n, len(body), body)
	}
	for _, split := range []int{1, -1} {
		first := request(1)
		if split < 0 {
			split = len(first)
		}
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if err := d.backend.HandOff(host, server, []byte(first[:split])); err != nil {
			t.Fatalf("HandOff: %v", err)
		}
		br := bufio.NewReader(client)
		for n, raw := range []string{first[split:], request(2)} {
			if _, err := io.WriteString(client, raw); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("buffered %d bytes, request %d: %v", split, n+1, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var r echoReply
			if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &r) != nil || r.Path != "/buffered" || r.Query["n"] != strconv.Itoa(n+1) || r.Event["n"] != float64(n+1) {
				t.Fatalf("buffered %d bytes, request %d: %d %s", split, n+1, resp.StatusCode, body)
			}
		}
		client.Close()
	}
}

// TestHandoffCrash: a process that dies with a request in flight on a handed-off
// connection resets that connection (no gateway is left to answer 502); the history shows a
// failed invocation and the client's next request reaches a new process.
func TestHandoffCrash(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	d.deploy("crashy", "python3.11", map[string]string{"handler.py": steerable}, api.FunctionFields{})
	hc, _ := oneConnClient(t)
	post := func(body string) (*http.Response, error) {
		return hc.Post(d.endpoint+"/fn/"+d.ns+"/crashy", "application/json", strings.NewReader(body))
	}
	resp, err := post(`{}`)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("warm-up: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body) // an unread body would close the connection
	resp.Body.Close()
	waitFor(t, "the handoff", 5*time.Second, func() bool { return d.stats("crashy").Direct == 1 })
	pid := d.stats("crashy").PIDs[0]
	if resp, err := post(`{"crash": true}`); err == nil {
		resp.Body.Close()
		t.Fatalf("the crashing request on a handed-off connection: want a connection error, got %d", resp.StatusCode)
	}
	// The pool learns of the death when it reaps the process, a moment after the client saw
	// its connection reset; a request in between would meet the dead process (502), as on
	// the gateway path after any crash.
	waitFor(t, "the pool to reap the crashed process", 5*time.Second, func() bool {
		s := d.stats("crashy")
		return len(s.PIDs) == 0 || s.PIDs[0] != pid
	})
	resp, err = post(`{"name":"again"}`)
	if err != nil {
		t.Fatalf("request after the crash: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "again") {
		t.Fatalf("request after the crash: %d %s", resp.StatusCode, body)
	}
	waitFor(t, "the crash in the history", 5*time.Second, func() bool {
		for _, inv := range d.invocations("crashy") {
			if inv.HTTPStatus == http.StatusBadGateway && inv.Status == "failed" {
				return true
			}
		}
		return false
	})
}

// TestHandoffEndsWhenAuthTurnsOn: only the gateway checks tokens, so turning require_auth
// on replaces the processes and the connections they hold; the next request meets the
// gateway's 401.
func TestHandoffEndsWhenAuthTurnsOn(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	ctx := context.Background()
	d.deploy("guarded", "python3.11", map[string]string{"handler.py": steerable}, api.FunctionFields{})
	if _, err := d.client.CreateTrigger(ctx, d.ns, api.CreateTrigger{Name: "guarded-http", TriggerFields: api.TriggerFields{
		Type: ptr(api.TriggerHTTP), Function: ptr("guarded")}}); err != nil {
		t.Fatal(err)
	}
	hc, _ := oneConnClient(t)
	post := func() int {
		resp, err := hc.Post(d.endpoint+"/fn/"+d.ns+"/guarded", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body) // an unread body would close the connection
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(); code != http.StatusOK {
		t.Fatalf("open trigger: %d", code)
	}
	waitFor(t, "the handoff", 5*time.Second, func() bool { return d.stats("guarded").Direct == 1 })
	pid := d.stats("guarded").PIDs[0]
	if _, err := d.client.UpdateTrigger(ctx, d.ns, "guarded-http", api.TriggerFields{RequireAuth: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the process holding the connection to stop", 10*time.Second, func() bool { return !alive(pid) })
	if code := post(); code != http.StatusUnauthorized {
		t.Fatalf("require_auth on: want 401 without a token, got %d", code)
	}
	if s := d.stats("guarded"); s.Direct != 0 {
		t.Fatalf("no connection may be handed off while auth is required: %+v", s)
	}
}
