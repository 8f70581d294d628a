package pool

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"sless.dev/sless/test/testkit"
)

// daemon starts a child in a session of its own (out of the function's process group) and
// answers with its pid.
const daemon = `import subprocess
def handle(event):
    return subprocess.Popen(["sleep", "60"], start_new_session=True).pid
`

// uidOf is the real uid of pid.
func uidOf(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			uid, _ := strconv.Atoi(strings.Fields(rest)[0])
			return uid
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return 0
}

// TestSandboxUsers: run as root, each function runs as a user of its own from the sandbox
// range, and what a function left running outside its process group (a daemon, holding its
// output pipes) neither holds the function's removal nor survives it.
func TestSandboxUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandboxes need root")
	}
	h := newHarness(t)
	if ok, why := h.pool.Isolation(); !ok {
		t.Fatalf("not sandboxed as root: %s", why)
	}
	art, err := buildPython(t.TempDir(), map[string]string{"handler.py": daemon})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"fn-a", "fn-b"} {
		if err := h.pool.Set(key, Spec{Artifact: art, MinProcs: 1, MaxProcs: 1, Target: 1, ScaleDown: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "both functions", 10*time.Second, func() bool {
		return h.pool.Stats("fn-a").Ready == 1 && h.pool.Stats("fn-b").Ready == 1
	})
	a, b := uidOf(t, h.pool.Stats("fn-a").PIDs[0]), uidOf(t, h.pool.Stats("fn-b").PIDs[0])
	if a == b || a < FirstSandboxUID || b < FirstSandboxUID || a >= FirstSandboxUID+SandboxUIDs {
		t.Fatalf("users of two functions: %d and %d", a, b)
	}
	code, body := h.call(t, "fn-a", `{}`)
	pid, err := strconv.Atoi(strings.TrimSpace(body))
	if code != 200 || err != nil || !testkit.Alive(pid) {
		t.Fatalf("the daemon: %d %s", code, body)
	}
	start := time.Now()
	h.pool.Remove("fn-a")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("removing the function took %s: held by its daemon", took)
	}
	testkit.WaitFor(t, "the daemon to die with its function", 10*time.Second, func() bool { return !testkit.Alive(pid) })
}
