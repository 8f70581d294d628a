package pool

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// jobHandler prints to stdout and logs to stderr before it answers, fails or overruns,
// as the event asks.
const jobHandler = `import sys, time

def handle(event, request=None):
    print("progress: started", flush=True)
    print("warning: on stderr", file=sys.stderr, flush=True)
    if event.get("fail"):
        raise ValueError("bad input: " + event["fail"])
    if event.get("sleep"):
        time.sleep(event["sleep"])
    return {"done": event.get("n", 0)}
`

// TestRunJob: the result is the handler's return value, the output holds what the handler
// printed on stdout and stderr (as a pod's log would), failures and overruns are errors.
func TestRunJob(t *testing.T) {
	art, err := buildPython(t.TempDir(), map[string]string{"handler.py": jobHandler})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := newPool(t, Options{})
	for _, tc := range []struct {
		name, event string
		timeout     time.Duration
		result      string
		err         string
	}{
		{name: "success", event: `{"n": 7}`, result: `{"done": 7}`},
		{name: "handler error", event: `{"fail": "no rows"}`, err: "bad input: no rows"},
		{name: "timeout", event: `{"sleep": 30}`, timeout: time.Second, err: "timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := p.RunJob(ctx, "job", Spec{Artifact: art, Timeout: tc.timeout}, []byte(tc.event))
			for _, printed := range []string{"progress: started", "warning: on stderr"} {
				if !strings.Contains(res.Output, printed) {
					t.Errorf("output lacks %q:\n%s", printed, res.Output)
				}
			}
			switch {
			case tc.err == "" && (res.Err != nil || strings.ReplaceAll(res.Result, " ", "") != strings.ReplaceAll(tc.result, " ", "")):
				t.Fatalf("result %q, error %v; want %s", res.Result, res.Err, tc.result)
			case tc.err != "" && (res.Err == nil || !strings.Contains(res.Err.Error(), tc.err)):
				t.Fatalf("error %v, want one containing %q", res.Err, tc.err)
			}
		})
	}
}

// TestRunJobMemory: a sandboxed job run that allocates beyond its memory_mb is killed, and
// its output says why.
func TestRunJobMemory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandboxes need root")
	}
	art, err := buildPython(t.TempDir(), map[string]string{"handler.py": "import time\ndef handle(event):\n    data = b'x' * (512 << 20)\n    time.sleep(1)\n    return len(data)\n"})
	if err != nil {
		t.Fatal(err)
	}
	res := newPool(t, Options{}).RunJob(context.Background(), "job", Spec{Artifact: art, MemoryMB: 64}, nil)
	if res.Err == nil || !strings.Contains(res.Output, "memory_mb of 64") {
		t.Fatalf("error %v, output:\n%s", res.Err, res.Output)
	}
}
