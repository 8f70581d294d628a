package pool

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/rules"
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
	h := serve(t, p)
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
		dropped = dropped || strings.Contains(l.Text, "of output dropped")
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

// TestOutputBytesAreCapped: a function printing long lines as fast as it can gets, with the
// default limits, at most 1 MiB plus 256 KiB a second into the output handed on (the log
// files) and into the platform's own log, says how much it dropped, is never held on its
// pipe; another function answers meanwhile and all its lines arrive.
func TestOutputBytesAreCapped(t *testing.T) {
	platform := &testkit.MatchCounter{Match: "function=flood"}
	var mu sync.Mutex
	var floodBytes int64
	var dropped bool
	var calm []string
	p := newPool(t, Options{Logger: slog.New(slog.NewTextHandler(platform, nil)), OnOutput: func(l Line) {
		mu.Lock()
		defer mu.Unlock()
		switch l.Function {
		case "flood":
			floodBytes += int64(len(l.Text))
			dropped = dropped || strings.Contains(l.Text, "of output dropped")
		case "calm":
			if strings.HasPrefix(l.Text, "calm ") { // not the wrapper's own lines
				calm = append(calm, l.Text)
			}
		}
	}})
	flood, err := buildPython(t.TempDir(), map[string]string{"handler.py": testkit.FloodPython})
	if err != nil {
		t.Fatal(err)
	}
	calmArt, err := buildPython(t.TempDir(), map[string]string{"handler.py": "def handle(event):\n    print('calm', event['n'], flush=True)\n    return 'calm'\n"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now() // the function's limits start full here
	for key, art := range map[string]*buildkit.Artifact{"flood": flood, "calm": calmArt} {
		if err := p.Set(key, Spec{Artifact: art, MinProcs: 1, MaxProcs: 1, Target: 10, ScaleDown: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	h := serve(t, p)
	testkit.WaitFor(t, "both functions", 10*time.Second, func() bool { return p.Stats("calm").Ready == 1 && p.Stats("flood").Ready == 1 })
	done := make(chan string, 1)
	floodStart := time.Now()
	go func() { _, body := h.call(t, "flood", `{"seconds":3}`); done <- body }()
	var slowest time.Duration
	calls := 0
	for time.Since(floodStart) < 3*time.Second {
		t0 := time.Now()
		if code, _ := h.call(t, "calm", fmt.Sprintf(`{"n":%d}`, calls)); code != 200 {
			t.Fatalf("calm function during the flood: %d", code)
		}
		slowest = max(slowest, time.Since(t0))
		calls++
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case body := <-done:
		if !strings.Contains(body, "flooded") {
			t.Fatalf("the flooding function answered %q", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the flooding function was held on its output")
	}
	if slowest > time.Second {
		t.Errorf("the calm function took %s during the flood", slowest)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, body := h.call(t, "flood", `{"seconds":0.1}`); !strings.Contains(body, "flooded") { // lets the notice out
		t.Fatalf("second call: %q", body)
	}
	time.Sleep(200 * time.Millisecond)
	bound := int64(1<<20) + int64(time.Since(start).Seconds()*(256<<10))
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d bytes of output passed, %d in the platform log; bound %d", floodBytes, platform.Bytes(), bound)
	if floodBytes > bound || !dropped {
		t.Errorf("%d bytes of output passed (at most %d), dropped notice %v", floodBytes, bound, dropped)
	}
	// Each record adds its time, level and attributes to the line.
	if got := platform.Bytes(); got > bound+bound/10+64<<10 {
		t.Errorf("%d bytes of the flooding function in the platform log (at most %d plus records)", got, bound)
	}
	if len(calm) != calls {
		t.Errorf("the calm function printed %d lines, %d arrived: %q", calls, len(calm), calm)
	}
}

// leaky prints its secret S every way a process can: on stdout and stderr, in a traceback,
// in a job's result and error, crashing mid-request, and at start-up before it exits.
const leaky = `import os, sys
S = os.environ["S"]
if os.environ.get("CRASH_AT_START"):
    print("starting with", S, flush=True)
    sys.exit(3)

def handle(event, request=None):
    print("out", S, flush=True)
    print("err", S, file=sys.stderr, flush=True)
    if event.get("raise"):
        raise ValueError("failed with " + S)
    if event.get("crash"):
        print("crashing with", S, file=sys.stderr, flush=True)
        os._exit(1)
    return {"value": S}
`

// TestOutputIsMasked: what a process prints of its spec's Mask reaches the pool's log,
// OnOutput, a start-up error, a crash warning and a job's result, output and error only as
// ***, a multi-line value line by line; a tail cut inside a value drops that line.
func TestOutputIsMasked(t *testing.T) {
	const value = "pool-secret-7f3e"
	var mu sync.Mutex
	var logged strings.Builder
	var lines []string
	p := newPool(t, Options{Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil)), StopGrace: time.Second,
		OnOutput: func(l Line) { mu.Lock(); lines = append(lines, l.Text); mu.Unlock() }})
	art, err := buildPython(t.TempDir(), map[string]string{"handler.py": leaky})
	if err != nil {
		t.Fatal(err)
	}
	mask := rules.NewSecretMasker([][]byte{[]byte(value)})
	spec := Spec{Artifact: art, Env: map[string]string{"S": value}, Mask: mask, MaxProcs: 1, Target: 1, ScaleDown: time.Minute}
	if err := p.Set("fn", spec); err != nil {
		t.Fatal(err)
	}
	crashing := spec
	crashing.Env = map[string]string{"S": value, "CRASH_AT_START": "1"}
	if err := p.Set("start", crashing); err != nil {
		t.Fatal(err)
	}
	h := serve(t, p)
	var answers []string
	for _, event := range []string{`{}`, `{"raise": true}`, `{"crash": true}`} {
		_, body := h.call(t, "fn", event)
		answers = append(answers, body)
	}
	if !strings.Contains(answers[0], value) {
		t.Fatalf("the caller gets what the function answered, unmasked: %s", answers[0])
	}
	code, startErr := h.call(t, "start", `{}`)
	if code != http.StatusBadGateway || !strings.Contains(startErr, "starting with "+rules.SecretMask) {
		t.Errorf("start-up error %d %q, want its output with the value masked", code, startErr)
	}
	job := p.RunJob(context.Background(), "job", spec, []byte(`{"raise": true}`))
	ok := p.RunJob(context.Background(), "job", spec, []byte(`{}`))
	if job.Err == nil || !strings.Contains(job.Err.Error(), "failed with "+rules.SecretMask) || !strings.Contains(ok.Result, rules.SecretMask) ||
		!strings.Contains(ok.Output, "out "+rules.SecretMask) {
		t.Errorf("job: error %v, result %q, output %q: want the value masked", job.Err, ok.Result, ok.Output)
	}
	// The crash is processed once its output drained or pipeDrain passed, so under load its
	// last line may reach the sinks after the warning: wait for both.
	testkit.WaitFor(t, "the crash warning and the crash's last line", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logged.String(), "function process crashed") && strings.Contains(strings.Join(lines, "\n"), "crashing with ")
	})
	mu.Lock()
	defer mu.Unlock()
	sinks := map[string]string{"log": logged.String(), "lines": strings.Join(lines, "\n"), "start-up error": startErr,
		"job": job.Err.Error() + ok.Result + ok.Output + job.Output}
	for sink, text := range sinks {
		if strings.Contains(text, value) {
			t.Errorf("%s holds the value: %s", sink, text)
		}
	}
	for _, want := range []string{"out " + rules.SecretMask, "err " + rules.SecretMask, "crashing with " + rules.SecretMask} {
		if !strings.Contains(sinks["lines"], want) || !strings.Contains(sinks["log"], want) {
			t.Errorf("lines and log lack %q", want)
		}
	}

	tail := newTailBuffer(16, rules.NewSecretMasker([][]byte{[]byte("abcdefgh\nijklmnop")}))
	tail.Write([]byte("xx abcdefgh\nijklmnop\nend\n"))
	if got := tail.String(); got != "***\nend" {
		t.Errorf("a cut tail reads %q, want its first line dropped and the value masked", got)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
