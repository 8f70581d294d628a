package pool

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
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

// TestDialReachesOnlyItsProcess: whatever a process's socket path comes to lead to — another
// listener of this machine (a root-only API), another function's process, a socket bound
// anew in its place — the pool sends that function's calls nowhere but to a process of its
// own: the listener found is not the process's, so the process is taken out of service and
// the call goes to a new one.
func TestDialReachesOnlyItsProcess(t *testing.T) {
	h := newHarness(t)
	for _, key := range []string{"fn-a", "fn-b"} {
		if err := h.pool.Set(key, Spec{Artifact: sharedArtifact(t), MaxProcs: 4, Target: 10, ScaleDown: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := h.call(t, "fn-b", `{"name": "b"}`); code != 200 {
		t.Fatalf("fn-b: %d %s", code, body)
	}
	// A root-only service elsewhere on the machine (a docker.sock stand-in).
	var reached atomic.Int64
	other := filepath.Join(t.TempDir(), "root-only.sock")
	ln, err := net.Listen("unix", other)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		io.WriteString(w, "ROOT-ONLY-API")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	redirects := map[string]func(path string) error{
		"a symlink to a root-only socket": func(path string) error { return os.Symlink(other, path) },
		"a symlink to another function's socket": func(path string) error {
			return os.Symlink(h.pool.Socket(h.pool.Stats("fn-b").Addrs[0]), path)
		},
		"a socket bound anew at its path": func(path string) error {
			l, err := net.Listen("unix", path)
			if err == nil {
				t.Cleanup(func() { l.Close() })
			}
			return err
		},
	}
	for name, redirect := range redirects {
		t.Run(name, func(t *testing.T) {
			code, first := h.call(t, "fn-a", `{}`)
			if code != 200 {
				t.Fatalf("before: %d %s", code, first)
			}
			path := h.pool.Socket(addrOf(t, h.pool, "fn-a", pidOf(t, first)))
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := redirect(path); err != nil {
				t.Fatal(err)
			}
			h.pool.transport.CloseIdleConnections() // the next call dials
			code, body := h.call(t, "fn-a", `{}`)
			if code != 200 || !strings.Contains(body, `"hello":"world"`) || pidOf(t, body) == pidOf(t, first) {
				t.Fatalf("after the socket was redirected: %d %s (first answer %s)", code, body, first)
			}
			if n := reached.Load(); n != 0 {
				t.Fatalf("the root-only service got %d requests", n)
			}
		})
	}
}

// addrOf is the address of key's process pid.
func addrOf(t *testing.T, p *Pool, key string, pid int) string {
	t.Helper()
	f := p.lookup(key)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, pr := range f.procs {
		if pr.pid() == pid {
			return pr.addr
		}
	}
	t.Fatalf("%s has no process %d", key, pid)
	return ""
}
