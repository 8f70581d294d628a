package runtimes_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/buildkit/sourcezip"
	"sless.dev/sless/dispatcher"
	"sless.dev/sless/rules"
	"sless.dev/sless/runtimes"
	"sless.dev/sless/test/testkit"
	"sless.dev/sless/triggers/cron"
)

// contractCase is one request sent as raw HTTP/1.1 to every runtime's echo handler (which
// answers {"event": …, "request": …}) and what each of them must make of it.
type contractCase struct {
	name    string
	method  string
	target  string   // the request target as sent, escapes and all
	headers []string // name, value pairs; a name may repeat
	body    string
	status  int // 200 unless set
	// event is the handler's event (JSON); request holds fields of its request argument.
	event   string
	request map[string]string
	// amqp: a message with this body reaches the handler as the same event
	// (dispatcher.EventBody is what the dispatcher posts for it).
	amqp bool
}

var contractCases = []contractCase{
	{name: "repeated query keys: the first in query, all in multiValueQuery", method: "GET",
		target: "/items?tag=a&tag=b&x=1&empty=&flag&sp=a+b%2Bc", event: `{}`,
		request: map[string]string{
			"query":           `{"tag":"a","x":"1","empty":"","flag":"","sp":"a b+c"}`,
			"multiValueQuery": `{"tag":["a","b"],"x":["1"],"empty":[""],"flag":[""],"sp":["a b+c"]}`,
		}},
	{name: "no query", method: "GET", target: "/", event: `{}`,
		request: map[string]string{"query": `{}`, "multiValueQuery": `{}`, "path": `"/"`, "method": `"GET"`}},
	{name: "percent-encoded path is decoded, + is kept", method: "GET", target: "/a%20b/caf%C3%A9/x%2Fy/1+1", event: `{}`,
		request: map[string]string{"path": `"/a b/café/x/y/1+1"`}},
	{name: "a malformed escape in the path is refused", method: "GET", target: "/bad%zz", status: 400},
	{name: "repeated headers: joined in headers, each in multiValueHeaders", method: "GET", target: "/",
		headers: []string{"X-Tag", "a", "X-Tag", "b", "Referer", "https://one.example/", "Referer", "https://two.example/"}, event: `{}`,
		request: map[string]string{
			`headers.x-tag`:             `"a, b"`,
			`multiValueHeaders.x-tag`:   `["a","b"]`,
			`headers.referer`:           `"https://one.example/, https://two.example/"`,
			`multiValueHeaders.referer`: `["https://one.example/","https://two.example/"]`,
		}},
	{name: "object body is the event", method: "POST", target: "/", body: `{"name":"ada","n":[1,2]}`, amqp: true,
		event: `{"name":"ada","n":[1,2]}`, request: map[string]string{"body": `"{\"name\":\"ada\",\"n\":[1,2]}"`, "isBase64Encoded": `false`}},
	{name: "empty body is {}", method: "POST", target: "/", body: "", amqp: true, event: `{}`, request: map[string]string{"body": `""`}},
	{name: "blank body is {}", method: "POST", target: "/", body: " \n", amqp: true, event: `{}`},
	{name: "array body under body", method: "POST", target: "/", body: `[1,"two"]`, amqp: true, event: `{"body":[1,"two"]}`},
	{name: "string body under body", method: "POST", target: "/", body: `"hi"`, amqp: true, event: `{"body":"hi"}`},
	{name: "number body under body", method: "POST", target: "/", body: `42`, amqp: true, event: `{"body":42}`},
	{name: "null body under body", method: "POST", target: "/", body: `null`, amqp: true, event: `{"body":null}`},
	{name: "text body under body", method: "POST", target: "/", body: "hello, world", amqp: true,
		event: `{"body":"hello, world"}`, request: map[string]string{"body": `"hello, world"`}},
	{name: "binary body: base64 in the request, replacement characters in the event", method: "POST", target: "/",
		headers: []string{"Content-Type", "application/octet-stream"}, body: "\xff\xfe\x00",
		event: `{"body":"\ufffd\ufffd\u0000"}`, request: map[string]string{"body": `"//4A"`, "isBase64Encoded": `true`}},
}

// runtimeNames are every runtime the API accepts.
var runtimeNames = []string{"go1.23", "go1.25", "python3.11", "python3.12", "nodejs20", "nodejs22"}

// TestContract runs the table over every runtime and version: the same request makes the same
// event and request in all of them (runtimes/README.md, "The handler contract"), and an AMQP
// message, a cron tick and an HTTP call with the same body make the same event.
func TestContract(t *testing.T) {
	for _, name := range runtimeNames {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			art := build(t, name, filepath.Join("testdata", "echo", string(buildkit.Runtimes[name].Language)))
			addr := start(t, name, art)
			for _, tc := range contractCases {
				t.Run(tc.name, func(t *testing.T) {
					status, got := call(t, addr, tc.method, tc.target, tc.headers, tc.body)
					if want := max(tc.status, 200); status != want {
						t.Fatalf("status %d, want %d: %s", status, want, got)
					}
					if status != 200 {
						return
					}
					var echo struct{ Event, Request map[string]any }
					if err := json.Unmarshal(got, &echo); err != nil {
						t.Fatalf("answer %s: %v", got, err)
					}
					if !jsonEqual(t, echo.Event, tc.event) {
						t.Errorf("event %s, want %s", marshal(echo.Event), tc.event)
					}
					for field, want := range tc.request {
						if v, ok := lookup(echo.Request, field); !ok || !jsonEqual(t, v, want) {
							t.Errorf("request.%s = %s, want %s", field, marshal(v), want)
						}
					}
					if tc.amqp {
						msg, err := dispatcher.EventBody("", []byte(tc.body), 1<<20)
						if err != nil {
							t.Fatalf("EventBody(%q): %v", tc.body, err)
						}
						_, got := call(t, addr, "POST", "/", []string{"Content-Type", "application/json"}, string(msg))
						var fromAMQP struct{ Event map[string]any }
						if err := json.Unmarshal(got, &fromAMQP); err != nil || !jsonEqual(t, fromAMQP.Event, tc.event) {
							t.Errorf("as an AMQP message (posted %s): event %s, want %s", msg, marshal(fromAMQP.Event), tc.event)
						}
					}
				})
			}
			t.Run("a cron tick is its event object", func(t *testing.T) {
				ev, err := cron.NewEvent("*/5 * * * *", "Europe/Berlin", time.Date(2026, 12, 3, 10, 4, 0, 0, time.UTC))
				if err != nil {
					t.Fatal(err)
				}
				ev.Trigger = "every-five"
				body := marshal(ev)
				_, got := call(t, addr, "POST", "/", []string{"Content-Type", "application/json"}, body)
				var echo struct{ Event map[string]any }
				if err := json.Unmarshal(got, &echo); err != nil || !jsonEqual(t, echo.Event, body) {
					t.Errorf("event %s, want %s", marshal(echo.Event), body)
				}
			})
			t.Run("signed calls", func(t *testing.T) { signedCalls(t, addr) })
			t.Run("a slow body is a 408 at the function's timeout", func(t *testing.T) {
				slowBody(t, start(t, name, art, "SLESS_TIMEOUT_SECONDS=1"), time.Second)
			})
		})
	}
}

// webSocketRuntime is the Go runtime the WebSocket handler builds on: golang.org/x/net
// requires Go 1.25. Only the net/http form upgrades (runtimes/README.md, "WebSockets").
const webSocketRuntime = "go1.25"

// TestWebSocketLibraries: a WebSocket echo works through the wrapper with every library
// runtimes/README.md names for the net/http form, whether it unwraps the response writer
// (http.ResponseController) or type-asserts http.Hijacker on it (gorilla/websocket,
// golang.org/x/net/websocket).
func TestWebSocketLibraries(t *testing.T) {
	art := build(t, webSocketRuntime, filepath.Join("testdata", "websocket", "go"))
	addr := start(t, webSocketRuntime, art, "SLESS_TIMEOUT_SECONDS=30")
	for _, library := range []string{"coder", "gorilla", "xnet"} {
		t.Run(library, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			path := "/" + library
			// golang.org/x/net/websocket.Handler refuses an upgrade without an Origin, as a
			// browser always sends one.
			sig := signed("GET", path, nil, time.Now())
			h := http.Header{"Origin": {"http://" + addr}, sig[0]: {sig[1]}}
			c, resp, err := websocket.Dial(ctx, "ws://"+addr+path, &websocket.DialOptions{HTTPHeader: h})
			if err != nil {
				status := 0
				if resp != nil {
					status = resp.StatusCode
				}
				t.Fatalf("upgrade: status %d: %v", status, err)
			}
			defer c.CloseNow()
			for _, msg := range []string{"one", "two"} {
				if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
					t.Fatal(err)
				}
				if _, got, err := c.Read(ctx); err != nil || string(got) != "echo: "+msg {
					t.Fatalf("echo of %q: %q %v", msg, got, err)
				}
			}
			_ = c.Close(websocket.StatusNormalClosure, "done")
		})
	}
}

// TestWrapperTimeoutLiterals: the wrappers cannot import rules, so each states as literals
// what the rules decide, held equal here: without SLESS_TIMEOUT_SECONDS a function has no
// timeout (0, for which the platform sets no deadline either: rules.InvocationDeadline),
// and without a timeout its body must arrive within the longest timeout a function may set,
// rules.MaxTimeoutSeconds, as at the gateway.
func TestWrapperTimeoutLiterals(t *testing.T) {
	type rule struct {
		name string
		ok   func(secs int) bool
	}
	noDeadline := rule{"a timeout without a deadline (rules.InvocationDeadline)", func(secs int) bool { return rules.InvocationDeadline(int32(secs)) == 0 }}
	isMax := rule{fmt.Sprintf("rules.MaxTimeoutSeconds (%d)", rules.MaxTimeoutSeconds), func(secs int) bool { return secs == rules.MaxTimeoutSeconds }}
	for _, c := range []struct {
		file, what, pattern string
		rule                rule
	}{
		{"go/server/server.go", "the default timeout", `envInt\("SLESS_TIMEOUT_SECONDS", (\d+)\)`, noDeadline},
		{"python/server.py", "the default timeout", `env_int\("SLESS_TIMEOUT_SECONDS", (\d+)\)`, noDeadline},
		{"node/server.js", "the default timeout", `envInt\('SLESS_TIMEOUT_SECONDS', (\d+)\)`, noDeadline},
		{"go/server/server.go", "the body bound without a timeout", `(?m)^\s*maxBodySeconds\s*=\s*(\d+)$`, isMax},
		{"python/server.py", "the body bound without a timeout", `(?m)^MAX_BODY_SECONDS = (\d+)$`, isMax},
		{"node/server.js", "the body bound without a timeout", `(?m)^const MAX_BODY_SECONDS = (\d+);$`, isMax},
	} {
		src, err := runtimes.FS.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(c.pattern).FindSubmatch(src)
		if m == nil {
			t.Errorf("%s: no %s", c.file, c.pattern)
			continue
		}
		if secs, _ := strconv.Atoi(string(m[1])); !c.rule.ok(secs) {
			t.Errorf("%s: %s is %d s, not %s", c.file, c.what, secs, c.rule.name)
		}
	}
}

// slowBody sends a body that trickles in, a byte every 300 ms, for longer than the function's
// timeout, with a length and chunked: the wrapper answers 408 once timeout has passed since
// the headers, however often a byte comes, and the handler never runs (runtimes/README.md,
// "Connections").
func slowBody(t *testing.T, addr string, timeout time.Duration) {
	const body = `{"trickled":"slowly"}`
	for framing, wire := range map[string]string{
		"Content-Length: " + strconv.Itoa(len(body)): body,
		"Transfer-Encoding: chunked":                 fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body),
	} {
		t.Run(framing, func(t *testing.T) {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var req strings.Builder
			fmt.Fprintf(&req, "POST / HTTP/1.1\r\nHost: %s\r\n%s\r\n", addr, framing)
			headers := signed("POST", "/", nil, time.Now())
			for i := 0; i+1 < len(headers); i += 2 {
				fmt.Fprintf(&req, "%s: %s\r\n", headers[i], headers[i+1])
			}
			req.WriteString("\r\n")
			if _, err := io.WriteString(c, req.String()); err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				tick := time.NewTicker(300 * time.Millisecond)
				defer tick.Stop()
				for i := range len(wire) {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					if _, err := c.Write([]byte{wire[i]}); err != nil {
						return // the wrapper answered and closed
					}
				}
			}()
			_ = c.SetReadDeadline(sent.Add(timeout + 10*time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer %s after the headers: %v", time.Since(sent).Round(time.Millisecond), err)
			}
			resp.Body.Close()
			took := time.Since(sent)
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("status %d after %s, want 408 at the %s timeout", resp.StatusCode, took.Round(time.Millisecond), timeout)
			}
			// The whole body would take over 6 s; a bound per read would never end it.
			if took < timeout-100*time.Millisecond || took > timeout+2500*time.Millisecond {
				t.Errorf("408 after %s, want it at the %s timeout", took.Round(time.Millisecond), timeout)
			}
		})
	}
}

// build builds the handler in dir for runtime as `sless dev` does. A runtime missing from
// the machine skips under -short (make test-unit) and fails otherwise (make test installs
// them: test/tools/deps.sh).
func build(t *testing.T, runtime, dir string) *buildkit.Artifact {
	t.Helper()
	rt := buildkit.Runtimes[runtime]
	if _, err := buildkit.Interpreter(rt); err != nil {
		if testing.Short() {
			t.Skipf("needs runtime %s on this machine: %v", runtime, err)
		}
		t.Fatalf("runtime %s: %v (test/tools/deps.sh installs it)", runtime, err)
	}
	zip, _, err := sourcezip.Zip(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src, err := buildkit.ValidateBytes(ctx, zip, runtime, "", buildkit.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	bc, err := buildkit.NewBuildContext(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	art, err := buildkit.LocalBuild(ctx, bc.Data, runtime, filepath.Join(t.TempDir(), "build"))
	if err != nil {
		t.Fatalf("local build for %s: %v", runtime, err)
	}
	return art
}

// start runs a built function (with env added) on a loopback port until the test ends and
// returns its address once it is healthy.
func start(t *testing.T, runtime string, art *buildkit.Artifact, env ...string) string {
	t.Helper()
	port := testkit.FreePort(t)
	cmd := exec.Command(art.Command[0], art.Command[1:]...)
	cmd.Dir = art.Dir
	cmd.Env = append(append(append(os.Environ(), art.Env...), "PORT="+strconv.Itoa(port), "SLESS_HOST=127.0.0.1",
		rules.EnvIdentityKey+"="+hex.EncodeToString(contractKey)), env...)
	stderr := &testkit.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s stderr:\n%s", runtime, stderr.String())
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(30 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			if status, _ := send(t, addr, "GET", buildkit.HealthPath, nil, ""); status == 200 {
				return addr
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("%s exited before it was healthy: %v\n%s", runtime, err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not healthy after 30s:\n%s", runtime, stderr.String())
		}
	}
}

// contractKey is the echo functions' key (SLESS_IDENTITY_KEY): every call but the health
// path must be signed with it.
var contractKey = rules.FunctionKey([]byte("contract master"), "contract", "echo")

// call sends a request the platform signed, as the gateway would (send).
func call(t *testing.T, addr, method, target string, headers []string, body string) (int, []byte) {
	t.Helper()
	return send(t, addr, method, target, signed(method, target, headers, time.Now()), body)
}

// signed is headers with the signature of a call of method to target made at.
func signed(method, target string, headers []string, at time.Time) []string {
	h := http.Header{}
	for i := 0; i+1 < len(headers); i += 2 {
		h.Add(headers[i], headers[i+1])
	}
	path, _, _ := strings.Cut(target, "?")
	return append(slices.Clone(headers), rules.HeaderSignature, rules.Signature(contractKey, at.Unix(), method, path, h))
}

// signedCalls: a runtime's wrapper with a key serves only calls signed with it, fresh,
// whose X-Sless-* headers are the ones signed (runtimes/README.md, "Signed calls"); every
// refusal is a 401 with a JSON error and the handler never runs (the echo would answer).
func signedCalls(t *testing.T, addr string) {
	identity := []string{"X-Sless-Subject", "alice", "X-Sless-Namespace", "sless-1a2b3c4d"}
	for _, tc := range []struct {
		name          string
		target        string
		headers       []string
		status        int
		subject       string // in the handler's request headers, when it ran
		stale, forged bool
	}{
		{name: "the caller's identity, signed", target: "/orders?id=7", headers: identity, status: 200, subject: "alice"},
		{name: "a subject in UTF-8, signed", target: "/", headers: []string{"X-Sless-Subject", "zo\u00eb@example.com"}, status: 200},
		{name: "a path starting with //, signed", target: "//double/slash", status: 200},
		{name: "a forged subject, unsigned", target: "/", headers: identity, status: 401},
		{name: "a subject changed after signing", target: "/", headers: identity, forged: true, status: 401},
		{name: "a call without a signature", target: "/", status: 401},
		{name: "a stale signature", target: "/", headers: identity, stale: true, status: 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			headers := tc.headers
			switch {
			case tc.stale:
				headers = signed("POST", tc.target, headers, time.Now().Add(-rules.SignatureBehind-time.Minute))
			case tc.forged:
				headers = signed("POST", tc.target, []string{"X-Sless-Subject", "alice"}, time.Now())
				headers = append(headers, "X-Sless-Namespace", "sless-1a2b3c4d")
			case tc.status == 200:
				headers = signed("POST", tc.target, headers, time.Now())
			}
			status, got := send(t, addr, "POST", tc.target, headers, `{"n":1}`)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, got)
			}
			var answer struct {
				Error   string
				Event   map[string]any
				Request struct{ Headers map[string]string }
			}
			if err := json.Unmarshal(got, &answer); err != nil {
				t.Fatalf("answer %s: %v", got, err)
			}
			if tc.status != 200 {
				if answer.Error == "" || answer.Event != nil {
					t.Errorf("refused with %s: want a JSON error and no handler run", got)
				}
				return
			}
			if answer.Event["n"] != float64(1) {
				t.Errorf("the handler's event %v", answer.Event)
			}
			if tc.subject != "" && answer.Request.Headers["x-sless-subject"] != tc.subject {
				t.Errorf("the handler saw subject %q, want %q", answer.Request.Headers["x-sless-subject"], tc.subject)
			}
		})
	}
}

// send writes one request as given (no client rewrites the target or merges headers) and
// reads the answer.
func send(t *testing.T, addr, method, target string, headers []string, body string) (int, []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	var req strings.Builder
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Length: %d\r\n", method, target, addr, len(body))
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&req, "%s: %s\r\n", headers[i], headers[i+1])
	}
	req.WriteString("\r\n" + body)
	if _, err := io.WriteString(c, req.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// lookup finds a dotted field (headers.x-tag) in a decoded JSON object.
func lookup(obj map[string]any, field string) (any, bool) {
	name, rest, nested := strings.Cut(field, ".")
	v, ok := obj[name]
	if !ok || !nested {
		return v, ok
	}
	inner, _ := v.(map[string]any)
	return lookup(inner, rest)
}

func jsonEqual(t *testing.T, got any, want string) bool {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("the table's %s: %v", want, err)
	}
	var g any
	_ = json.Unmarshal([]byte(marshal(got)), &g)
	return reflect.DeepEqual(g, w)
}

func marshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
