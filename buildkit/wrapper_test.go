package buildkit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/test/testkit"
)

// buildHandler zips a handler directory and builds it locally, as `sless dev` would.
func buildHandler(t *testing.T, dir, runtime, entry string) *Artifact {
	t.Helper()
	needRuntime(t, runtime)
	bc := buildContext(t, zipDir(t, dir), runtime, entry)
	out := filepath.Join(t.TempDir(), "build")
	art, err := LocalBuild(context.Background(), bc.Data, runtime, out)
	if err != nil {
		t.Fatalf("local build of %s: %v", dir, err)
	}
	return art
}

func command(art *Artifact, env ...string) *exec.Cmd {
	cmd := exec.Command(art.Command[0], art.Command[1:]...)
	cmd.Dir = art.Dir
	cmd.Env = append(append(os.Environ(), art.Env...), env...)
	return cmd
}

type function struct {
	url    string
	cmd    *exec.Cmd
	stderr *testkit.Buffer
	exited chan error
}

// startFunction runs a built function on a free loopback port and waits for its health path.
func startFunction(t *testing.T, art *Artifact, env ...string) *function {
	t.Helper()
	port := testkit.FreePort(t)
	cmd := command(art, append([]string{"PORT=" + strconv.Itoa(port), "SLESS_HOST=127.0.0.1"}, env...)...)
	fn := &function{url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, stderr: &testkit.Buffer{}, exited: make(chan error, 1)}
	cmd.Stderr = fn.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { fn.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-fn.exited
		if t.Failed() {
			t.Logf("function stderr:\n%s", fn.stderr.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(fn.url + HealthPath)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return fn
			}
		}
		select {
		case err := <-fn.exited:
			t.Fatalf("function exited before becoming healthy: %v\n%s", err, fn.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("function not healthy after 20s: %v\n%s", err, fn.stderr.String())
		}
		time.Sleep(30 * time.Millisecond)
	}
}

type reply struct {
	status int
	ctype  string
	body   []byte
	took   time.Duration
}

func (r reply) json(t *testing.T) map[string]interface{} {
	t.Helper()
	var out map[string]interface{}
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatalf("response %d %q is not a JSON object: %v", r.status, r.body, err)
	}
	return out
}

func (fn *function) call(t *testing.T, method, path string, body []byte, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, fn.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: out, took: time.Since(start)}
}

// handlerCase is one test function and what it supports.
type handlerCase struct {
	name, dir, runtime string
	request            bool // receives the request metadata
	size               bool // supports action=size and sleep markers
	stream             bool // supports action=stream and astream (runtimes/README.md, "Streamed responses")
}

var handlerCases = []handlerCase{
	{name: "go with go.mod", dir: "testdata/handlers/gomod", runtime: "go1.23", request: true, size: true, stream: true},
	{name: "go without go.mod", dir: "testdata/handlers/gonomod", runtime: "go1.25"},
	{name: "python", dir: "testdata/handlers/python", runtime: "python3.11", request: true, size: true, stream: true},
	{name: "node", dir: "testdata/handlers/node", runtime: "nodejs20", request: true, size: true, stream: true},
}

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestWrappers(t *testing.T) {
	for _, hc := range handlerCases {
		t.Run(hc.name, func(t *testing.T) {
			// Each case builds its own artifact and starts its own processes on free ports;
			// most of a case is waiting (timeouts, drains), so the four overlap.
			t.Parallel()
			art := buildHandler(t, hc.dir, hc.runtime, "")
			t.Run("http", func(t *testing.T) { testHTTP(t, hc, art) })
			t.Run("bodies", func(t *testing.T) { testBodies(t, hc, art) })
			if hc.request {
				t.Run("response objects", func(t *testing.T) { testResponses(t, hc, art) })
			}
			if hc.stream {
				t.Run("streams", func(t *testing.T) { testStreams(t, art) })
			}
			t.Run("job", func(t *testing.T) { testJob(t, hc, art) })
			t.Run("graceful shutdown", func(t *testing.T) { testShutdown(t, art) })
			t.Run("health hold", func(t *testing.T) { testHealthHold(t, art) })
		})
	}
}

func testHTTP(t *testing.T, hc handlerCase, art *Artifact) {
	fn := startFunction(t, art, "SLESS_TIMEOUT_SECONDS=1")

	r := fn.call(t, "POST", "/orders/42?verbose=1&q=a%20b", []byte(`{"action":"echo","x":1}`), "Traceparent", traceparent, "X-Custom", "yes")
	if r.status != 200 || r.ctype != "application/json" {
		t.Fatalf("echo: %d %s %s", r.status, r.ctype, r.body)
	}
	out := r.json(t)
	if ev, _ := out["event"].(map[string]interface{}); ev["x"] != float64(1) {
		t.Errorf("event not passed through: %s", r.body)
	}
	if hc.request {
		req, _ := out["request"].(map[string]interface{})
		query, _ := req["query"].(map[string]interface{})
		headers, _ := req["headers"].(map[string]interface{})
		if req["method"] != "POST" || req["path"] != "/orders/42" || query["q"] != "a b" || headers["x-custom"] != "yes" || req["traceparent"] != traceparent {
			t.Errorf("request metadata = %v", req)
		}
	}

	if r := fn.call(t, "GET", "/", nil); r.status != 200 || r.json(t)["event"] == nil {
		t.Errorf("empty body must give an empty event: %d %s", r.status, r.body)
	}
	if r := fn.call(t, "PUT", "/", []byte(`[1,2]`)); r.status != 200 || !strings.Contains(string(r.body), `"body":[1,2]`) {
		t.Errorf("non-object JSON must arrive under body: %d %s", r.status, r.body)
	}
	if r := fn.call(t, "POST", "/", []byte(`{"action":"text","name":"sless"}`)); r.status != 200 || !strings.HasPrefix(r.ctype, "text/plain") || string(r.body) != "hello sless" {
		t.Errorf("text: %d %s %q", r.status, r.ctype, r.body)
	}
	r = fn.call(t, "POST", "/", []byte(`{"action":"error"}`))
	if r.status != 500 || r.ctype != "application/json" || !strings.Contains(fmt.Sprint(r.json(t)["error"]), "boom") {
		t.Errorf("error: %d %s %s", r.status, r.ctype, r.body)
	}

	marker := filepath.Join(t.TempDir(), "finished")
	r = fn.call(t, "POST", "/", []byte(fmt.Sprintf(`{"action":"sleep","seconds":3,"marker":%q}`, marker)))
	if r.status != http.StatusGatewayTimeout || !strings.Contains(fmt.Sprint(r.json(t)["error"]), "timed out") {
		t.Errorf("timeout: %d %s", r.status, r.body)
	}
	if r.took > 2500*time.Millisecond {
		t.Errorf("the 1s timeout answered after %s: the handler was waited for", r.took)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the handler finished before the timeout answer")
	}
	// The abandoned handler is still sleeping; the function keeps serving meanwhile.
	if r := fn.call(t, "POST", "/", []byte(`{"action":"text","name":"again"}`)); r.status != 200 || r.took > time.Second {
		t.Errorf("request after a timeout: %d in %s", r.status, r.took)
	}
	if r := fn.call(t, "POST", "/", []byte(`{"action":"sleep","seconds":0.1}`)); r.status != 200 {
		t.Errorf("a handler within its timeout: %d %s", r.status, r.body)
	}

	if r := fn.call(t, "GET", HealthPath, nil); r.status != 200 {
		t.Errorf("health after all that: %d", r.status)
	}
	if !strings.Contains(fn.stderr.String(), traceparent) {
		t.Errorf("traceparent not logged:\n%s", fn.stderr.String())
	}
}

// testBodies checks the body cap on a function whose timeout is not the subject: the 1 s of
// testHTTP also bounds reading and parsing a 5 MiB body, which a loaded machine can exceed.
func testBodies(t *testing.T, hc handlerCase, art *Artifact) {
	fn := startFunction(t, art, "SLESS_TIMEOUT_SECONDS=60")
	if hc.size {
		big := strings.Repeat("x", 5<<20)
		r := fn.call(t, "POST", "/", []byte(`{"action":"size","data":"`+big+`"}`))
		if r.status != 200 || r.json(t)["bytes"] != float64(len(big)) {
			t.Errorf("5 MiB body: %d %.200s", r.status, r.body)
		}
	}
	r := fn.call(t, "POST", "/", bytes.Repeat([]byte("y"), 7<<20))
	if r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("7 MiB body over the 6 MiB cap: %d %.200s", r.status, r.body)
	}
}

// png is a 1×1 PNG: a binary body must arrive byte for byte.
var png = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x01\x01\x01\x00\x18\xdd\x8d\xb4\x00\x00\x00\x00IEND\xaeB`\x82")

// testResponses checks the response-object contract (runtimes/README.md) and the raw
// request the same way in every runtime.
func testResponses(t *testing.T, hc handlerCase, art *Artifact) {
	fn := startFunction(t, art)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		name     string
		response string
		status   int
		header   map[string][]string // wanted values; nil = must be absent
		body     []byte
		errorHas string // a 500 whose error names the mistake
	}{
		{name: "created with a header", response: `{"statusCode":201,"headers":{"Location":"/orders/1","X-Count":5,"X-Ok":true},"body":"made"}`,
			status: 201, header: map[string][]string{"Location": {"/orders/1"}, "X-Count": {"5"}, "X-Ok": {"true"}, "Content-Type": {"text/plain; charset=utf-8"}}, body: []byte("made")},
		{name: "html page", response: `{"statusCode":200,"headers":{"content-type":"text/html; charset=utf-8"},"body":"<h1>hi</h1>"}`,
			status: 200, header: map[string][]string{"Content-Type": {"text/html; charset=utf-8"}}, body: []byte("<h1>hi</h1>")},
		{name: "redirect without a body", response: `{"statusCode":302,"headers":{"Location":"https://example.com/"}}`,
			status: 302, header: map[string][]string{"Location": {"https://example.com/"}}, body: []byte{}},
		{name: "binary body", response: `{"statusCode":200,"headers":{"Content-Type":"image/png"},"isBase64Encoded":true,"body":"` + base64.StdEncoding.EncodeToString(png) + `"}`,
			status: 200, header: map[string][]string{"Content-Type": {"image/png"}}, body: png},
		{name: "binary body without a type", response: `{"statusCode":200,"isBase64Encoded":true,"body":"AAE="}`,
			status: 200, header: map[string][]string{"Content-Type": {"application/octet-stream"}}, body: []byte{0, 1}},
		{name: "multi-value headers", response: `{"statusCode":200,"headers":{"Vary":"Origin"},"multiValueHeaders":{"Set-Cookie":["a=1","b=2"],"Vary":["Accept"]},"body":""}`,
			status: 200, header: map[string][]string{"Set-Cookie": {"a=1", "b=2"}, "Vary": {"Origin", "Accept"}}, body: []byte{}},
		{name: "json body", response: `{"statusCode":422,"body":{"ok":false}}`,
			status: 422, header: map[string][]string{"Content-Type": {"application/json"}}, body: []byte(`{"ok":false}`)},
		{name: "no content", response: `{"statusCode":204,"headers":{"X-Id":"7"}}`, status: 204, header: map[string][]string{"X-Id": {"7"}}, body: []byte{}},
		{name: "hop-by-hop and platform headers are dropped",
			response: `{"statusCode":200,"headers":{"Content-Length":"999","Transfer-Encoding":"chunked","Connection":"close","Upgrade":"h2c","X-Sless-Cold-Start":"true","X-Kept":"1"},"body":"abc"}`,
			status:   200, header: map[string][]string{"Content-Length": {"3"}, "Transfer-Encoding": nil, "Upgrade": nil, "X-Sless-Cold-Start": nil, "X-Kept": {"1"}}, body: []byte("abc")},
		{name: "a string statusCode is a plain result", response: `{"statusCode":"201","x":1}`,
			status: 200, header: map[string][]string{"Content-Type": {"application/json"}}, body: []byte(`{"statusCode":"201","x":1}`)},
		{name: "status out of range", response: `{"statusCode":42}`, errorHas: "statusCode 42"},
		{name: "a misspelt key", response: `{"statusCode":200,"header":{"a":"b"}}`, errorHas: "unknown key"},
		{name: "bad base64", response: `{"statusCode":200,"isBase64Encoded":true,"body":"%%%"}`, errorHas: "base64"},
		{name: "header injection", response: `{"statusCode":200,"headers":{"X-A":"a\r\nSet-Cookie: x=1"}}`, errorHas: "CR, LF"},
		{name: "bad header name", response: `{"statusCode":200,"headers":{"X A":"1"}}`, errorHas: "header name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", fn.url+"/", strings.NewReader(`{"action":"respond","response":`+tc.response+`}`))
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if tc.errorHas != "" {
				if resp.StatusCode != 500 || !strings.Contains(string(body), "invalid response object") || !strings.Contains(string(body), tc.errorHas) {
					t.Fatalf("%d %s; want 500 naming %q", resp.StatusCode, body, tc.errorHas)
				}
				return
			}
			if resp.StatusCode != tc.status || !bytes.Equal(body, tc.body) {
				t.Fatalf("%d %q; want %d %q", resp.StatusCode, body, tc.status, tc.body)
			}
			for name, want := range tc.header {
				if got := resp.Header.Values(name); fmt.Sprint(got) != fmt.Sprint(want) && !(want == nil && len(got) == 0) {
					t.Errorf("header %s = %q, want %q (all: %v)", name, got, want, resp.Header)
				}
			}
		})
	}
	if hc.runtime == "go1.23" {
		if r := fn.call(t, "POST", "/", []byte(`{"action":"struct"}`)); r.status != 202 || string(r.body) != "accepted" {
			t.Errorf("a typed Go response: %d %q", r.status, r.body)
		}
	}

	// The raw request: a form body as text, a binary body as base64, repeated headers.
	req, _ := http.NewRequest("POST", fn.url+"/raw", strings.NewReader("a=1&b=2"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Add("X-Multi", "one")
	req.Header.Add("X-Multi", "two")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var echo struct {
		Request struct {
			Body   string              `json:"body"`
			B64    bool                `json:"isBase64Encoded"`
			Multi  map[string][]string `json:"multiValueHeaders"`
			Header map[string]string   `json:"headers"`
		} `json:"request"`
	}
	if err := json.Unmarshal(out, &echo); err != nil || echo.Request.Body != "a=1&b=2" || echo.Request.B64 ||
		fmt.Sprint(echo.Request.Multi["x-multi"]) != "[one two]" || echo.Request.Header["content-type"] != "application/x-www-form-urlencoded" {
		t.Errorf("raw text request: %s (%v)", out, err)
	}
	r := fn.call(t, "POST", "/raw", png)
	if err := json.Unmarshal(r.body, &echo); err != nil || !echo.Request.B64 || echo.Request.Body != base64.StdEncoding.EncodeToString(png) {
		t.Errorf("raw binary request: %s (%v)", r.body, err)
	}
}

// jobCase is one run of a function in job mode.
type jobCase struct {
	name     string
	event    *string // SLESS_EVENT; nil = stdin
	stdin    string
	timeout  string
	wantCode int
	wantOut  string
}

func testJob(t *testing.T, hc handlerCase, art *Artifact) {
	tests := []jobCase{
		{name: "text from env", event: ptr.To(`{"action":"text","name":"job"}`), wantOut: "hello job"},
		{name: "json from stdin", stdin: `{"action":"echo","k":"v"}`, wantOut: `"k":"v"`},
		{name: "handler error", event: ptr.To(`{"action":"error"}`), wantCode: 1, wantOut: "boom"},
		{name: "timeout", event: ptr.To(`{"action":"sleep","seconds":5}`), timeout: "1", wantCode: 1, wantOut: "timed out"},
	}
	if hc.stream { // a streamed result is drained into the job's result
		tests = append(tests, jobCase{name: "stream drained", event: ptr.To(`{"action":"stream","count":3}`), wantOut: "chunk 0\nchunk 1\nchunk 2\n"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			term := filepath.Join(t.TempDir(), "termination-log")
			env := []string{"SLESS_MODE=job", "SLESS_TERMINATION_LOG=" + term, "SLESS_TIMEOUT_SECONDS=" + tc.timeout, "TRACEPARENT=" + traceparent}
			if tc.event != nil {
				env = append(env, "SLESS_EVENT="+*tc.event)
			}
			cmd := command(art, env...)
			cmd.Stdin = strings.NewReader(tc.stdin)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			err := cmd.Run()
			code := 0
			if exitErr, ok := err.(*exec.ExitError); ok {
				code = exitErr.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode || !strings.Contains(stdout.String(), tc.wantOut) {
				t.Errorf("exit %d stdout %q, want %d and %q; stderr:\n%s", code, stdout.String(), tc.wantCode, tc.wantOut, stderr.String())
			}
			msg, err := os.ReadFile(term)
			if err != nil || !strings.Contains(string(msg), tc.wantOut) {
				t.Errorf("termination message %q (%v), want %q", msg, err, tc.wantOut)
			}
			if tc.timeout != "" && time.Since(start) > 4*time.Second {
				t.Errorf("a 1s job timeout took %s", time.Since(start))
			}
			if !strings.Contains(stderr.String(), traceparent) {
				t.Errorf("traceparent not logged:\n%s", stderr.String())
			}
		})
	}
}

// testShutdown is every wrapper's drain on SIGTERM. New connections are refused at once (a
// caller's dial retry finds another pod). An idle keep-alive connection is not cut at once: a
// caller's pool (the interceptor's, pinned to the pod through its Service) may be sending on
// it at that instant, and a POST whose connection closed under it is not retried. A request
// that comes on it is answered with Connection: close; the idle ones are closed once none
// came for the quiet second. A request in flight completes and its response ends its
// connection, and the process exits 0 once nothing is in flight.
func testShutdown(t *testing.T, art *Artifact) {
	fn := startFunction(t, art)
	addr := strings.TrimPrefix(fn.url, "http://")
	health := func(r *bufio.Reader, c net.Conn) *http.Response {
		t.Helper()
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: fn\r\n\r\n", HealthPath); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	// Two idle keep-alive connections: one is used during the drain, one left alone.
	var conns [2]net.Conn
	var readers [2]*bufio.Reader
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i], readers[i] = c, bufio.NewReader(c)
		if health(readers[i], c).Close {
			t.Fatal("a health check before SIGTERM closed its keep-alive connection")
		}
	}

	type answer struct {
		resp *http.Response
		body []byte
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		c := &http.Client{Transport: &http.Transport{}}
		resp, err := c.Post(fn.url+"/", "application/json", strings.NewReader(`{"action":"sleep","seconds":3}`))
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		done <- answer{resp, body, err}
	}()
	time.Sleep(300 * time.Millisecond)
	if err := fn.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	term := time.Now()
	time.Sleep(100 * time.Millisecond) // the signal handled

	if resp := health(readers[0], conns[0]); resp.StatusCode != http.StatusOK || !resp.Close {
		t.Errorf("a request on an idle connection during the drain: %d, headers %v; want 200 with Connection: close", resp.StatusCode, resp.Header)
	}
	_ = conns[0].SetReadDeadline(time.Now().Add(time.Second))
	if _, err := readers[0].ReadByte(); err != io.EOF {
		t.Errorf("the connection after its Connection: close answer: %v, want EOF", err)
	}
	refused := false
	for deadline := time.Now().Add(500 * time.Millisecond); !refused && time.Now().Before(deadline); {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if refused = err != nil; !refused {
			c.Close()
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !refused {
		t.Error("new connections still accepted 0.5s after SIGTERM (callers retry a refused dial elsewhere)")
	}
	_ = conns[1].SetReadDeadline(term.Add(4 * time.Second))
	if _, err := readers[1].ReadByte(); err == nil {
		t.Error("the idle keep-alive connection received bytes after SIGTERM")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("the idle keep-alive connection is still open 4s after SIGTERM, 1s past the last request (the drain must close it)")
	}

	a := <-done
	switch {
	case a.err != nil:
		t.Errorf("in-flight request during shutdown: %v", a.err)
	case a.resp.StatusCode != http.StatusOK:
		t.Errorf("in-flight request during shutdown: %d %s", a.resp.StatusCode, a.body)
	case !a.resp.Close:
		t.Errorf("the response finished during the drain keeps its connection (headers %v), want Connection: close", a.resp.Header)
	}
	select {
	case err := <-fn.exited:
		fn.exited <- err // for the cleanup
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, fn.stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Error("still running 5s after SIGTERM with nothing in flight")
	}
}

// TestReadinessWaitsForTheHandler: the wrappers listen before they load the handler, so a
// readiness probe sent while a slow module loads is held and answered once it has loaded —
// not refused, which would cost a cold start a whole probe period.
func TestReadinessWaitsForTheHandler(t *testing.T) {
	// The handler's load marks its start and end with files ($MARK.start, $MARK.end) — written
	// before the load goes on, unlike stderr, whose copy into the test lags the process — so a
	// probe sent once the load started must be answered only after the end mark exists,
	// however long the interpreter took to start on a loaded machine.
	for _, tc := range []struct{ runtime, file, code string }{
		{"python3.11", "handler.py", "import os, time\nopen(os.environ['MARK'] + '.start', 'w').close()\ntime.sleep(1.5)  # a heavy import\nopen(os.environ['MARK'] + '.end', 'w').close()\n\ndef handle(event):\n    return 'loaded'\n"},
		{"nodejs20", "handler.js", "const fs = require('fs'); fs.writeFileSync(process.env.MARK + '.start', ''); const end = Date.now() + 1500; while (Date.now() < end) {} // a heavy require\nfs.writeFileSync(process.env.MARK + '.end', '');\nexports.handle = () => 'loaded';\n"},
	} {
		t.Run(tc.runtime, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.code), 0o644); err != nil {
				t.Fatal(err)
			}
			art := buildHandler(t, dir, tc.runtime, "")
			mark := filepath.Join(t.TempDir(), "load")
			marked := func(what string) bool { _, err := os.Stat(mark + "." + what); return err == nil }
			port := testkit.FreePort(t)
			cmd := command(art, "PORT="+strconv.Itoa(port), "SLESS_HOST=127.0.0.1", "MARK="+mark)
			stderr := &testkit.Buffer{}
			cmd.Stderr = stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			testkit.WaitFor(t, "the handler's load to start", 30*time.Second, func() bool { return marked("start") })
			if marked("end") {
				t.Skip("the load ended before it could be probed (a stalled machine); nothing to check")
			}
			url := fmt.Sprintf("http://127.0.0.1:%d%s", port, HealthPath)
			resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(url)
			if err != nil {
				t.Fatalf("probe during the load: %v\n%s", err, stderr.String())
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !marked("end") {
				t.Fatalf("probe answered %d before the load ended (end mark written: %v):\n%s", resp.StatusCode, marked("end"), stderr.String())
			}
		})
	}
}

// testHealthHold: the health path answers at once, or after ?hold_ms (at most 2 s) — what a
// scheduled pre-warm keeps in flight so the interceptor counts the function busy.
func testHealthHold(t *testing.T, art *Artifact) {
	fn := startFunction(t, art)
	// "At once" is the fastest of three calls under 200 ms: a held answer is slow every
	// time, a loaded machine's stall only now and then.
	atOnce := func(what, path string) {
		t.Helper()
		var r reply
		for range 3 {
			if r = fn.call(t, "GET", path, nil); r.status != 200 || r.took <= 200*time.Millisecond {
				break
			}
		}
		if r.status != 200 || r.took > 200*time.Millisecond {
			t.Errorf("%s: %d after %s", what, r.status, r.took)
		}
	}
	atOnce("plain health check", "/healthz")
	if r := fn.call(t, "GET", "/healthz?hold_ms=400", nil); r.status != 200 || r.took < 380*time.Millisecond || r.took > 1500*time.Millisecond {
		t.Errorf("health check held 400 ms: %d after %s", r.status, r.took)
	}
	if r := fn.call(t, "GET", "/healthz?hold_ms=60000", nil); r.status != 200 || r.took < 1900*time.Millisecond || r.took > 3500*time.Millisecond {
		t.Errorf("health check asking for a minute: %d after %s, want the 2 s cap", r.status, r.took)
	}
	atOnce("health check with a hold that is not a number", "/healthz?hold_ms=soon")
}
