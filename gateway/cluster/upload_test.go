package cluster_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/gateway/codecheck"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testkit"
)

// goHandler echoes the event and the request the Go runtime wrapper passes in, and sleeps
// when asked.
const goHandler = `package handler

import "time"

func Handle(event, request map[string]interface{}) interface{} {
	if ms, ok := event["sleep_ms"].(float64); ok {
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	return map[string]interface{}{"event": event, "request": request}
}
`

// startFunction builds a stored upload locally the way the image build would and runs the
// Go runtime wrapper on addr: the real function standing behind the interceptor address,
// holding its key as its pod would, so it serves the calls the harness gateway signs.
func startFunction(t *testing.T, store buildkit.Store, ns, name, contextKey, runtime, addr string) {
	t.Helper()
	ctx := context.Background()
	rc, err := store.Get(ctx, contextKey)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	art, err := buildkit.LocalBuild(ctx, data, runtime, filepath.Join(t.TempDir(), "build"))
	if err != nil {
		t.Fatalf("local build: %v", err)
	}
	host, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command(art.Command[0], art.Command[1:]...)
	cmd.Dir = art.Dir
	cmd.Env = append(append(os.Environ(), art.Env...), "PORT="+port, "SLESS_HOST="+host, "SLESS_TIMEOUT_SECONDS=2",
		rules.EnvIdentityKey+"="+hex.EncodeToString(rules.FunctionKey(identityMaster, ns, name)))
	if testing.Verbose() {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testkit.WaitFor(t, "the function to listen", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// TestUploadBuildInvoke is the whole path with real parts: upload through the API, stored
// zip and build context, the Go runtime built from that context, invoked through /fn/.
func TestUploadBuildInvoke(t *testing.T) {
	addr := testkit.FreeAddr(t)
	h := newHarness(t, harnessOptions{interceptor: "http://" + addr})
	tn := h.tenant()
	ctx := context.Background()
	if _, err := tn.c.CreateFunction(ctx, tn.ns, api.CreateFunction{Name: "echo", FunctionFields: api.FunctionFields{
		Runtime: ptr.To("go1.23"), TimeoutSec: ptr.To(int32(2))}}); err != nil {
		t.Fatal(err)
	}
	fn, err := tn.c.UploadSource(ctx, tn.ns, "echo", bytes.NewReader(testkit.Zip(t, map[string]string{"handler.go": goHandler})))
	if err != nil {
		t.Fatal(err)
	}
	if fn.Source == nil || len(fn.Source.SHA256) != 64 || !strings.HasPrefix(fn.Source.ContextKey, "contexts/"+tn.ns+"/echo/") {
		t.Fatalf("source after upload: %+v", fn.Source)
	}
	src, err := tn.c.GetSource(ctx, tn.ns, "echo")
	if err != nil || len(src.Files) != 1 || src.Files[0].Name != "handler.go" || src.Files[0].Content != goHandler {
		t.Fatalf("source viewer: %+v, %v", src, err)
	}

	startFunction(t, h.store, tn.ns, "echo", fn.Source.ContextKey, "go1.23", addr)
	setStatus(t, tn.ns, "echo", "echo."+tn.ns+".fn.sless.test", true)
	h.waitRoute(tn.ns, "echo", func(r backend.Route) bool { return r.Host != "" })

	resp, err := http.Post(h.URL+"/fn/"+tn.ns+"/echo/orders/7?verbose=1", "application/json", strings.NewReader(`{"a": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Event   map[string]any `json:"event"`
		Request struct {
			Method, Path, Traceparent string
			Query                     map[string]any
		} `json:"request"`
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("invoke: %d %v", resp.StatusCode, err)
	}
	if out.Event["a"] != float64(1) || out.Request.Path != "/orders/7" || out.Request.Method != "POST" ||
		out.Request.Query["verbose"] != "1" || out.Request.Traceparent == "" {
		t.Fatalf("the function saw %+v", out)
	}
	// The wrapper enforces the function's 2s timeout itself; its 504 passes through.
	if code, _, _ := do(t, "POST", h.URL+"/fn/"+tn.ns+"/echo", "", "application/json", strings.NewReader(`{"sleep_ms": 3000}`)); code != http.StatusGatewayTimeout {
		t.Fatalf("slow invocation: %d, want 504", code)
	}
}

func TestUploadRejects(t *testing.T) {
	h := newHarness(t, harnessOptions{limits: buildkit.Limits{MaxZipBytes: 64 << 10, MaxUncompressedBytes: 1 << 20, MaxEntries: 100, MaxCompressionRatio: 100, RatioMinBytes: 1 << 20}})
	tn := h.tenant()
	ctx := context.Background()
	for _, name := range []string{"py", "gofn"} {
		rt := map[string]string{"py": "python3.12", "gofn": "go1.25"}[name]
		if _, err := tn.c.CreateFunction(ctx, tn.ns, api.CreateFunction{Name: name, FunctionFields: api.FunctionFields{Runtime: ptr.To(rt)}}); err != nil {
			t.Fatal(err)
		}
	}
	big := make([]byte, 100<<10)
	_, _ = rand.Read(big)
	cases := []struct {
		name, fn string
		body     []byte
		code     int
	}{
		{"larger than the zip cap", "py", big, http.StatusRequestEntityTooLarge},
		{"not a zip", "py", []byte("hello"), http.StatusBadRequest},
		{"parent path", "py", testkit.Zip(t, map[string]string{"../handler.py": "def handle(e): return e"}), http.StatusBadRequest},
		{"no entry point", "py", testkit.Zip(t, map[string]string{"main.py": "print(1)"}), http.StatusBadRequest},
		{"go without Handle", "gofn", testkit.Zip(t, map[string]string{"handler.go": "package handler\n"}), http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, e, _ := do(t, "POST", h.URL+"/v1/namespaces/"+tn.ns+"/functions/"+tc.fn+"/upload", tn.token, "application/zip", bytes.NewReader(tc.body))
			if code != tc.code || e.Field != "source" || e.Error == "" {
				t.Fatalf("%d %+v, want %d on field source", code, e, tc.code)
			}
		})
	}
	if _, err := tn.c.UploadSource(ctx, tn.ns, "missing", bytes.NewReader(testkit.Zip(t, map[string]string{"handler.py": "def handle(e): return e"}))); !client.IsNotFound(err) {
		t.Fatalf("upload to a missing function: %v, want 404", err)
	}
	if _, err := tn.c.GetSource(ctx, tn.ns, "py"); !client.IsNotFound(err) {
		t.Fatalf("source before any upload: %v, want 404", err)
	}
}

// llmStandIn answers like an OpenAI-compatible chat endpoint: unsafe when the code mentions a
// miner.
func llmStandIn(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model    string `json:"model"`
			Messages []struct{ Role, Content string }
		}
		if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil || len(req.Messages) != 2 || req.Model != "reviewer" {
			http.Error(w, "bad request", 400)
			return
		}
		verdict := `{"safe": true, "reason": "ordinary code"}`
		if strings.Contains(req.Messages[1].Content, "xmrig") {
			verdict = "```json\n{\"safe\": false, \"reason\": \"starts a crypto miner\"}\n```"
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]string{"role": "assistant", "content": verdict}}}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestUploadCodeCheck(t *testing.T) {
	llm := llmStandIn(t)
	for _, tc := range []struct {
		name, endpoint, code string
		want                 int
	}{
		{"safe code", llm.URL + "/v1", "def handle(e):\n    return e\n", 200},
		{"unsafe code", llm.URL + "/v1", "import os\ndef handle(e):\n    os.system('xmrig')\n", 400},
		{"reviewer unreachable: upload proceeds", "http://" + testkit.FreeAddr(t) + "/v1", "import os\ndef handle(e):\n    os.system('xmrig')\n", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{codeCheck: &codecheck.LLM{URL: tc.endpoint, Model: "reviewer"}})
			tn := h.tenant()
			if _, err := tn.c.CreateFunction(context.Background(), tn.ns, api.CreateFunction{Name: "f", FunctionFields: api.FunctionFields{Runtime: ptr.To("python3.11")}}); err != nil {
				t.Fatal(err)
			}
			code, e, _ := do(t, "POST", h.URL+"/v1/namespaces/"+tn.ns+"/functions/f/upload", tn.token, "application/zip",
				bytes.NewReader(testkit.Zip(t, map[string]string{"handler.py": tc.code})))
			if code != tc.want {
				t.Fatalf("%d %+v, want %d", code, e, tc.want)
			}
			if code == 400 && !strings.Contains(e.Error, "crypto miner") {
				t.Fatalf("rejection without the reviewer's reason: %q", e.Error)
			}
		})
	}
}

// TestJobUpload: a self-contained job is created first and gets its code by upload, like a
// function; a job that runs a function refuses code of its own.
func TestJobUpload(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tn := h.tenant()
	ctx := context.Background()
	if _, err := tn.c.CreateJob(ctx, tn.ns, api.CreateJob{Name: "oneoff", JobFields: api.JobFields{
		Runtime: ptr.To("python3.11"), RunID: ptr.To(int64(1))}}); err != nil {
		t.Fatalf("self-contained job without code yet: %v", err)
	}
	j, err := tn.c.UploadJobSource(ctx, tn.ns, "oneoff", bytes.NewReader(testkit.Zip(t, map[string]string{"handler.py": "def handle(event):\n    return event\n"})))
	if err != nil {
		t.Fatal(err)
	}
	if j.Source == nil || len(j.Source.SHA256) != 64 || !strings.HasPrefix(j.Source.ContextKey, "contexts/"+tn.ns+"/oneoff/") {
		t.Fatalf("job source after upload: %+v", j.Source)
	}
	// The stored context is what the build reads.
	if _, err := h.store.Get(ctx, j.Source.ContextKey); err != nil {
		t.Fatalf("stored context: %v", err)
	}
	// A zip without the runtime's entry file is refused with what to fix.
	code, body, _ := do(t, "POST", h.URL+"/v1/namespaces/"+tn.ns+"/jobs/oneoff/upload", tn.token, "application/zip",
		bytes.NewReader(testkit.Zip(t, map[string]string{"main.py": "x = 1\n"})))
	if code != http.StatusBadRequest || !strings.Contains(body.Error, "handler.py") {
		t.Fatalf("upload without handler.py: %d %+v", code, body)
	}

	if _, err := tn.c.CreateJob(ctx, tn.ns, api.CreateJob{Name: "byref", JobFields: api.JobFields{Function: ptr.To("somefn")}}); err != nil {
		t.Fatal(err)
	}
	code, body, _ = do(t, "POST", h.URL+"/v1/namespaces/"+tn.ns+"/jobs/byref/upload", tn.token, "application/zip",
		bytes.NewReader(testkit.Zip(t, map[string]string{"handler.py": "def handle(e):\n    return e\n"})))
	if code != http.StatusConflict || body.Field != "function" {
		t.Fatalf("upload to a job with function: %d %+v", code, body)
	}
}
