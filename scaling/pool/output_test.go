package pool

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.dev/sless/test/testkit"
)

// TestOutputFloodIsCapped: a function printing 200,000 lines at once gets its own output
// cut to its rate (with a line saying how much was dropped), stdout and stderr arrive
// tagged, and another function answers meanwhile as fast as ever.
func TestOutputFloodIsCapped(t *testing.T) {
	var mu sync.Mutex
	got := map[string][]Line{}
	p := newPool(t, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), OutputRate: 100, OutputBurst: 500,
		OnOutput: func(l Line) { mu.Lock(); got[l.Function] = append(got[l.Function], l); mu.Unlock() }})
	flood, err := buildPython(t.TempDir(), map[string]string{"handler.py": `import sys
def handle(event):
    print("to stdout", flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    for i in range(200000):
        print("flood line", i)
    sys.stdout.flush()
    return "done"
`})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Set("flood", Spec{Artifact: flood, MaxProcs: 1, Target: 10, ScaleDown: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := p.Set("calm", Spec{Artifact: sharedArtifact(t), MinProcs: 1, MaxProcs: 1, Target: 10, ScaleDown: time.Minute}); err != nil {
		t.Fatal(err)
	}
	h := &harness{pool: p, srv: httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			fn := pr.In.Header.Get("X-Fn")
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", fn, fn
		},
		Transport: p,
	})}
	t.Cleanup(h.srv.Close)
	testkit.WaitFor(t, "the calm function", 10*time.Second, func() bool { return p.Stats("calm").Ready == 1 })
	start := time.Now()
	done := make(chan string, 1)
	go func() { _, body := h.call(t, "flood", `{}`); done <- body }()
	var slowest time.Duration
	for time.Since(start) < 2*time.Second {
		t0 := time.Now()
		if code, _ := h.call(t, "calm", `{}`); code != 200 {
			t.Fatalf("calm function during the flood: %d", code)
		}
		slowest = max(slowest, time.Since(t0))
	}
	if body := <-done; !strings.Contains(body, "done") {
		t.Fatalf("the flooding function answered %q", body)
	}
	if slowest > time.Second {
		t.Errorf("the calm function took %s during the flood", slowest)
	}
	time.Sleep(1200 * time.Millisecond) // the rate lets the "dropped" notice through
	if _, body := h.call(t, "flood", `{}`); !strings.Contains(body, "done") {
		t.Fatalf("second call: %q", body)
	}
	time.Sleep(100 * time.Millisecond) // the last lines read
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	lines := got["flood"]
	var stdout, stderr, dropped bool
	for _, l := range lines {
		stdout = stdout || (l.Stream == "stdout" && l.Text == "to stdout")
		stderr = stderr || (l.Stream == "stderr" && l.Text == "to stderr")
		dropped = dropped || strings.Contains(l.Text, "lines of output dropped")
		if l.Instance == "" || l.Time.IsZero() {
			t.Fatalf("line without its instance or time: %+v", l)
		}
	}
	// The burst, then the rate over the whole run, and a "dropped" line a second.
	limit := 500 + int(elapsed.Seconds()*(100+1)) + 2
	if len(lines) > limit || !stdout || !stderr || !dropped {
		t.Fatalf("%d lines passed (at most %d), stdout %v, stderr %v, dropped notice %v", len(lines), limit, stdout, stderr, dropped)
	}
}
