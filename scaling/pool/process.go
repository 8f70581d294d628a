package pool

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"sless.dev/sless/buildkit"
)

// process is one running instance of a function's wrapper. ready, stopping, inflight and
// lastUsed belong to the function and are guarded by its mutex; the rest by mu.
type process struct {
	pool *Pool
	fn   *function
	spec Spec
	log  *slog.Logger
	// addr is the host name the pool's transport dials (it maps to the socket); sock the
	// Unix socket the wrapper listens on.
	addr, sock string
	started    time.Time
	tail       *tailBuffer

	ready, stopping, dead bool
	inflight              int
	lastUsed              time.Time

	mu      sync.Mutex
	cmd     *exec.Cmd
	stopReq bool
	exited  chan struct{} // closed once the process is gone (or never started)
	exitErr error
}

func newProcess(f *function, spec Spec, log *slog.Logger) *process {
	p := f.pool
	addr := "p" + strconv.FormatInt(p.seq.Add(1), 10)
	return &process{pool: p, fn: f, spec: spec, log: log, addr: addr, sock: p.socketPath(addr), tail: newTailBuffer(4096), exited: make(chan struct{})}
}

func (pr *process) pid() int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.cmd == nil || pr.cmd.Process == nil {
		return 0
	}
	return pr.cmd.Process.Pid
}

// start launches the wrapper on its Unix socket in its own process group.
func (pr *process) start() error {
	art := pr.spec.Artifact
	argv := command(art)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = art.Dir
	cmd.Env = processEnv(pr.spec, pr.sock)
	stdout, err := newLogPipe(pr.lineWriter("stdout"))
	if err != nil {
		pr.fail(err)
		return err
	}
	defer stdout.started()
	stderr, err := newLogPipe(pr.lineWriter("stderr"))
	if err != nil {
		pr.fail(err)
		return err
	}
	defer stderr.started()
	cmd.Stdout, cmd.Stderr = stdout.w, stderr.w
	// Own group: stopping the function kills whatever it forked. Pdeathsig: if sless dev
	// itself is killed, its functions die with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.started = time.Now()
	if pr.stopReq {
		pr.failLocked(errors.New("stopped before it started"))
		return errors.New("stopped before it started")
	}
	if err = cmd.Start(); err != nil {
		err = fmt.Errorf("starting %s: %w", art.Command[0], err)
		pr.failLocked(err)
		return err
	}
	pr.cmd = cmd
	pgid, runDir := cmd.Process.Pid, pr.pool.opts.RunDir
	if err := recordGroup(runDir, pgid); err != nil {
		pr.log.Warn("Warning: what this function forks may outlive a crash of sless dev", "error", err)
	}
	go func() {
		err := cmd.Wait()
		// Whatever the wrapper forked dies with it, however it ended.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		forgetGroup(runDir, pgid)
		_ = os.Remove(pr.sock)
		<-stdout.done // the last lines (a crash's traceback) are in the tail before anyone looks
		<-stderr.done
		pr.mu.Lock()
		pr.exitErr = err
		pr.mu.Unlock()
		close(pr.exited)
	}()
	return nil
}

func (pr *process) fail(err error) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.failLocked(err)
}

func (pr *process) failLocked(err error) {
	pr.exitErr = err
	close(pr.exited)
}

// processEnv is the wrapper's environment: a minimal base (no secrets of sless dev leak into
// functions), the runtime's settings, the function's env vars, then the wrapper contract.
func processEnv(spec Spec, sock string) []string {
	env := []string{}
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "LANG", "TZ"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, spec.Artifact.Env...)
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = append(env, k+"="+spec.Env[k])
	}
	env = append(env, "SLESS_TIMEOUT_SECONDS="+strconv.Itoa(int(spec.Timeout/time.Second)))
	if sock != "" {
		env = append(env, "SLESS_SOCKET="+sock)
	}
	return env
}

// waitHealthy polls /healthz until it answers 200, the process exits or timeout passes. The
// first polls are 1 ms apart: the cold start budget of a Go function is tens of ms.
func (pr *process) waitHealthy(timeout time.Duration) error {
	url := "http://" + pr.addr + "/healthz"
	deadline := time.Now().Add(timeout)
	delay := time.Millisecond
	for {
		resp, err := pr.pool.health.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-pr.exited:
			return fmt.Errorf("process exited during start-up (%v); its output: %s", pr.wait(), pr.tail.String())
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer on %s within %s; its output: %s", url, timeout, pr.tail.String())
		}
		delay = min(delay*2, 20*time.Millisecond)
	}
}

// wait blocks until the process is gone and returns how it ended.
func (pr *process) wait() error {
	<-pr.exited
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.exitErr
}

// stop sends SIGTERM to the process group and SIGKILL after grace.
func (pr *process) stop(grace time.Duration) {
	pr.mu.Lock()
	pr.stopReq = true
	cmd := pr.cmd
	pr.mu.Unlock()
	if cmd == nil {
		return
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-pr.exited:
	case <-time.After(grace):
		pr.log.Warn("Warning: function process ignored SIGTERM; killing it", "pid", pgid, "grace", grace)
	}
	// The wrapper may have left children in its group; none may outlive it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-pr.exited
}

// tailBuffer keeps the last n bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func newTailBuffer(n int) *tailBuffer { return &tailBuffer{n: n} }

func (t *tailBuffer) Write(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.n; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}

// releasingBody gives the request slot back when the response body is closed, so streamed
// responses count as in flight until they end.
type releasingBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}

// command is how an artifact runs. Python runs with -S: like in the runtime image, a
// function sees the standard library and its own requirements (PYTHONPATH), not this
// machine's site-packages, whose .pth hooks can cost a cold start 100 ms and more.
func command(art *buildkit.Artifact) []string {
	if rt, err := buildkit.LookupRuntime(art.Runtime); err == nil && rt.Language == buildkit.LanguagePython {
		return append([]string{art.Command[0], "-S"}, art.Command[1:]...)
	}
	return art.Command
}
