package pool

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
	if iso := h.pool.Isolation(); !iso.Sandboxed {
		t.Fatalf("not sandboxed as root: %s", iso.Why)
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

// escapee forks a grandchild in a session of its own — out of the wrapper's process tree and
// group — that allocates event["mb"] MiB and holds them; it answers with its pid.
const escapee = `import os, time

def handle(event):
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(w, str(os.getpid()).encode())
            data = bytearray(event["mb"] << 20)
            for i in range(0, len(data), 4096):
                data[i] = 1
            time.sleep(60)
        os._exit(0)
    os.close(w)
    pid = int(os.read(r, 32))
    os.wait()
    return pid
`

// TestMemoryMBHoldsWhatLeftTheTree: memory_mb holds every process a function started, one
// that double-forked into a session of its own included (issue 51: such a daemon held 273 MiB
// under memory_mb 64).
func TestMemoryMBHoldsWhatLeftTheTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandboxes need root")
	}
	h := newHarness(t)
	art, err := buildPython(t.TempDir(), map[string]string{"handler.py": escapee})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.pool.Set("fn-e", Spec{Artifact: art, MaxProcs: 1, Target: 1, ScaleDown: time.Minute, MemoryMB: 64}); err != nil {
		t.Fatal(err)
	}
	code, body := h.call(t, "fn-e", `{"mb": 256}`)
	pid, err := strconv.Atoi(strings.TrimSpace(body))
	if code != 200 || err != nil {
		t.Fatalf("the escapee: %d %s", code, body)
	}
	testkit.WaitFor(t, "the escaped process over memory_mb to be killed", 20*time.Second, func() bool { return !testkit.Alive(pid) })
}

// bomber forks children that sleep 3 s until it may not, then answers how many it got.
const bomber = `import os, time

def handle(event):
    n = 0
    try:
        while n < event["max"]:
            if os.fork() == 0:
                time.sleep(3)
                os._exit(0)
            n += 1
    except OSError:
        pass
    return n
`

// TestTasksAreCountedPerFunction: the task limit holds a function as a whole — two of its
// revisions (pool entries of one Group) forking at once share it (issue 51: 1,406 tasks for
// one function with two revisions under a limit of 1,024), while another function has its
// own.
func TestTasksAreCountedPerFunction(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandboxes need root")
	}
	const tasks = 48
	h := serve(t, newPool(t, Options{Logger: slog.New(slog.DiscardHandler), Tick: 20 * time.Millisecond, StopGrace: 2 * time.Second, Sandbox: SandboxOptions{Tasks: tasks}}))
	art, err := buildPython(t.TempDir(), map[string]string{"handler.py": bomber})
	if err != nil {
		t.Fatal(err)
	}
	for key, group := range map[string]string{"rev-1": "fn", "rev-2": "fn", "other": ""} {
		if err := h.pool.Set(key, Spec{Artifact: art, Group: group, MinProcs: 1, MaxProcs: 1, Target: 1, ScaleDown: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "the warm processes", 20*time.Second, func() bool {
		return h.pool.Stats("rev-1").Ready == 1 && h.pool.Stats("rev-2").Ready == 1 && h.pool.Stats("other").Ready == 1
	})
	forked := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, key := range []string{"rev-1", "rev-2", "other"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body := h.call(t, key, `{"max": 200}`)
			n, err := strconv.Atoi(strings.TrimSpace(body))
			if code != 200 || err != nil {
				t.Errorf("%s: %d %s", key, code, body)
			}
			mu.Lock()
			forked[key] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Each wrapper is a few threads of the limit itself.
	if sum := forked["rev-1"] + forked["rev-2"]; sum >= tasks || forked["rev-1"] == 0 || forked["rev-2"] == 0 {
		t.Errorf("two revisions of one function forked %d and %d children under a limit of %d tasks", forked["rev-1"], forked["rev-2"], tasks)
	}
	if n := forked["other"]; n >= tasks || n < tasks/2 {
		t.Errorf("another function forked %d children under its own limit of %d tasks", n, tasks)
	}
}
