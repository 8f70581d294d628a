package pool

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/test/testkit"
)

// buildPython builds files as a python3.11 function into a temporary directory.
func buildPython(dir string, files map[string]string) (*buildkit.Artifact, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, content := range files {
		w, err := zw.Create(name)
		if err != nil {
			return nil, err
		}
		if _, err := io.WriteString(w, content); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	ctx := context.Background()
	src, err := buildkit.ValidateBytes(ctx, buf.Bytes(), "python3.11", "", buildkit.DefaultLimits())
	if err != nil {
		return nil, err
	}
	bc, err := buildkit.NewBuildContext(ctx, src)
	if err != nil {
		return nil, err
	}
	return buildkit.LocalBuild(ctx, bc.Data, "python3.11", filepath.Join(dir, "build-"+bc.Hash[:12]))
}

type harness struct {
	pool *Pool
	srv  *httptest.Server
}

// newHarness serves a new pool behind a reverse proxy the way the gateway does.
func newHarness(t *testing.T) *harness {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return serve(t, newPool(t, Options{Logger: log, Tick: 20 * time.Millisecond, StopGrace: 2 * time.Second}))
}

// serve puts p behind the reverse proxy: the request's X-Fn header names the function.
func serve(t *testing.T, p *Pool) *harness {
	t.Helper()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			fn := pr.In.Header.Get("X-Fn")
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", fn, fn
		},
		Transport: p,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return &harness{pool: p, srv: srv}
}

func (h *harness) call(t testing.TB, fn, body string) (int, string) {
	t.Helper()
	resp, b := testkit.PostJSON(t, h.srv.URL+"/", body, http.Header{"X-Fn": {fn}})
	return resp.StatusCode, string(b)
}

// shared is testkit.SteerablePython, built once in TestMain.
var shared *buildkit.Artifact

func sharedArtifact(testing.TB) *buildkit.Artifact { return shared }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sless-pool-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, err = buildPython(dir, map[string]string{"handler.py": testkit.SteerablePython})
	if err != nil {
		fmt.Fprintln(os.Stderr, "building the test function:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestColdStartAndScaleToZero(t *testing.T) {
	h := newHarness(t)
	spec := Spec{Artifact: sharedArtifact(t), MaxProcs: 3, Target: 10, ScaleDown: 300 * time.Millisecond}
	if err := h.pool.Set("fn-a", spec); err != nil {
		t.Fatal(err)
	}
	if s := h.pool.Stats("fn-a"); s.Processes != 0 {
		t.Fatalf("min 0: want no process before the first request, got %+v", s)
	}
	code, body := h.call(t, "fn-a", `{}`)
	if code != http.StatusOK || !strings.Contains(body, `"pid"`) {
		t.Fatalf("cold request: %d %s", code, body)
	}
	pids := h.pool.Stats("fn-a").PIDs
	if len(pids) != 1 {
		t.Fatalf("want one process after a cold start, got %v", pids)
	}
	testkit.WaitFor(t, "scale to zero", 5*time.Second, func() bool { return h.pool.Stats("fn-a").Processes == 0 })
	testkit.WaitFor(t, "the process to be gone from the OS", 2*time.Second, func() bool { return !testkit.Alive(pids[0]) })
	code, body = h.call(t, "fn-a", `{}`)
	if code != http.StatusOK || strings.Contains(body, fmt.Sprint(pids[0])) {
		t.Fatalf("second cold start: %d %s (old pid %d)", code, body, pids[0])
	}
}

func TestConcurrentColdRequestsStayWithinMax(t *testing.T) {
	h := newHarness(t)
	spec := Spec{Artifact: sharedArtifact(t), MaxProcs: 4, Target: 2, ScaleDown: time.Minute}
	if err := h.pool.Set("fn-b", spec); err != nil {
		t.Fatal(err)
	}
	maxSeen, failed := testkit.Burst(50,
		func() (int, string) { return h.call(t, "fn-b", `{"sleep": 0.05}`) },
		func() int { return h.pool.Stats("fn-b").Processes })
	if len(failed) > 0 {
		t.Fatalf("%d of 50 requests failed, first: %s", len(failed), failed[0])
	}
	if maxSeen > spec.MaxProcs {
		t.Fatalf("saw %d processes, max is %d", maxSeen, spec.MaxProcs)
	}
	if maxSeen < 2 {
		t.Fatalf("50 concurrent requests with target 2 should scale out; saw %d process(es)", maxSeen)
	}
}

func TestCrashMidRequestThenRecover(t *testing.T) {
	h := newHarness(t)
	if err := h.pool.Set("fn-c", Spec{Artifact: sharedArtifact(t), MaxProcs: 2, Target: 10, ScaleDown: time.Minute}); err != nil {
		t.Fatal(err)
	}
	code, body := h.call(t, "fn-c", `{"crash": true}`)
	if code != http.StatusBadGateway {
		t.Fatalf("crashing request: want 502, got %d %s", code, body)
	}
	code, body = h.call(t, "fn-c", `{}`)
	if code != http.StatusOK {
		t.Fatalf("request after the crash: %d %s", code, body)
	}
}

// TestGoneSocketIsRetriedOnANewProcess: a process whose socket is gone but whose exit has not
// been seen (a crash on a loaded machine) serves no further request: the next one, which it
// never received, goes to a new process instead of failing.
func TestGoneSocketIsRetriedOnANewProcess(t *testing.T) {
	h := newHarness(t)
	if err := h.pool.Set("fn-g", Spec{Artifact: sharedArtifact(t), MaxProcs: 2, Target: 10, ScaleDown: time.Minute}); err != nil {
		t.Fatal(err)
	}
	code, first := h.call(t, "fn-g", `{}`)
	if code != http.StatusOK {
		t.Fatalf("first request: %d %s", code, first)
	}
	if err := os.Remove(h.pool.Socket(h.pool.Stats("fn-g").Addrs[0])); err != nil {
		t.Fatal(err)
	}
	// As when the process exits: its connections are gone, the next request dials.
	h.pool.transport.CloseIdleConnections()
	for i := range 2 {
		code, body := h.call(t, "fn-g", `{}`)
		if code != http.StatusOK {
			t.Fatalf("request %d after the socket went: %d %s", i+1, code, body)
		}
		if pidOf(t, body) == pidOf(t, first) {
			t.Fatalf("request %d went to the process without a socket (%s)", i+1, body)
		}
	}
}

func pidOf(t *testing.T, body string) int {
	t.Helper()
	var out struct{ PID int }
	if err := json.Unmarshal([]byte(body), &out); err != nil || out.PID == 0 {
		t.Fatalf("no pid in %q: %v", body, err)
	}
	return out.PID
}

func TestMinProcsStayWarmAndCrashIsReplaced(t *testing.T) {
	h := newHarness(t)
	if err := h.pool.Set("fn-d", Spec{Artifact: sharedArtifact(t), MinProcs: 1, MaxProcs: 2, Target: 10, ScaleDown: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the warm process", startWait, func() bool { return h.pool.Stats("fn-d").Ready == 1 })
	first := h.pool.Stats("fn-d").PIDs[0]
	time.Sleep(300 * time.Millisecond) // well past the scale-down period
	if s := h.pool.Stats("fn-d"); s.Ready != 1 || s.PIDs[0] != first {
		t.Fatalf("min 1 must keep the process warm: %+v (was pid %d)", s, first)
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "a replacement process", startWait, func() bool {
		s := h.pool.Stats("fn-d")
		return s.Ready == 1 && s.PIDs[0] != first
	})
}

func TestDisabledStopsProcessesAndRefuses(t *testing.T) {
	h := newHarness(t)
	spec := Spec{Artifact: sharedArtifact(t), MinProcs: 1, MaxProcs: 1, Target: 1, ScaleDown: time.Minute}
	if err := h.pool.Set("fn-e", spec); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the warm process", startWait, func() bool { return h.pool.Stats("fn-e").Ready == 1 })
	pid := h.pool.Stats("fn-e").PIDs[0]
	spec.Disabled = true
	if err := h.pool.Set("fn-e", spec); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the disabled function to stop", 5*time.Second, func() bool { return h.pool.Stats("fn-e").Processes == 0 && !testkit.Alive(pid) })
	if code, body := h.call(t, "fn-e", `{}`); code != http.StatusBadGateway || !strings.Contains(body, "disabled") {
		t.Fatalf("disabled function: want 502 naming the reason, got %d %s", code, body)
	}
	spec.Disabled = false
	if err := h.pool.Set("fn-e", spec); err != nil {
		t.Fatal(err)
	}
	if code, body := h.call(t, "fn-e", `{}`); code != http.StatusOK {
		t.Fatalf("re-enabled: %d %s", code, body)
	}
}

func TestStartFailureIsRetriedOnceThenReported(t *testing.T) {
	h := newHarness(t)
	broken, err := buildPython(t.TempDir(), map[string]string{"handler.py": "import no_such_module_sless\n\ndef handle(event):\n    return 1\n"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.pool.Set("fn-f", Spec{Artifact: broken, MaxProcs: 1, Target: 1, ScaleDown: time.Minute}); err != nil {
		t.Fatal(err)
	}
	code, body := h.call(t, "fn-f", `{}`)
	if code != http.StatusBadGateway || !strings.Contains(body, "no_such_module_sless") {
		t.Fatalf("want 502 with the start-up error, got %d %s", code, body)
	}
	if s := h.pool.Stats("fn-f"); s.Processes != 0 {
		t.Fatalf("failed starts must not leave processes: %+v", s)
	}
}

func TestUnknownFunction(t *testing.T) {
	h := newHarness(t)
	if code, _ := h.call(t, "nope", `{}`); code != http.StatusBadGateway {
		t.Fatalf("unknown function: want 502, got %d", code)
	}
}

// newPool starts a pool closed when the test ends.
func newPool(t testing.TB, o Options) *Pool {
	t.Helper()
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// startWait bounds a wait for processes to start: it catches a pool that never starts
// them, not a slow start — Python's takes seconds on a loaded 2-core CI machine.
const startWait = 30 * time.Second

func TestCloseLeavesNoProcess(t *testing.T) {
	p := newPool(t, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := p.Set("fn-g", Spec{Artifact: sharedArtifact(t), MinProcs: 2, MaxProcs: 2, Target: 1, ScaleDown: time.Minute}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "two warm processes", startWait, func() bool { return p.Stats("fn-g").Ready == 2 })
	pids := p.Stats("fn-g").PIDs
	p.Close()
	for _, pid := range pids {
		if testkit.Alive(pid) {
			t.Fatalf("process %d outlived Close", pid)
		}
	}
	if err := p.Set("fn-g", Spec{Artifact: sharedArtifact(t)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Set after Close: want ErrClosed, got %v", err)
	}
}
