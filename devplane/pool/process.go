package pool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/rules"
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
	return &process{pool: p, fn: f, spec: spec, log: log, addr: addr, sock: p.socketPath(addr), tail: newTailBuffer(4096, spec.Mask), exited: make(chan struct{})}
}

func (pr *process) pid() int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.cmd == nil || pr.cmd.Process == nil {
		return 0
	}
	return pr.cmd.Process.Pid
}

// start launches the wrapper on its Unix socket in its own process group, sandboxed as its
// function's user when the pool can.
func (pr *process) start() error {
	cmd, jailed, err := pr.command()
	if err != nil {
		pr.fail(err)
		return err
	}
	started := false
	defer func() {
		for _, f := range cmd.ExtraFiles {
			f.Close() // the process has its own copy
		}
		if !started {
			_ = os.Remove(pr.sock)
		}
	}()
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
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.started = time.Now()
	if pr.stopReq {
		pr.failLocked(errors.New("stopped before it started"))
		return errors.New("stopped before it started")
	}
	if jailed != nil {
		err = pr.pool.jail.start(jailed)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		err = fmt.Errorf("starting %s: %w", pr.spec.Artifact.Command[0], err)
		pr.failLocked(err)
		return err
	}
	pr.cmd, started = cmd, true
	pr.pool.procs.Store(pr.addr, pr)
	pgid, runDir := cmd.Process.Pid, pr.pool.opts.RunDir
	if err := recordGroup(runDir, pgid); err != nil {
		pr.log.Warn("Warning: what this function forks may outlive a crash of sless dev", "error", err)
	}
	say := func(text string) {
		if on := pr.pool.opts.OnOutput; on != nil {
			on(Line{Time: time.Now(), Function: pr.fn.key, Instance: pr.addr, Stream: "stderr", Text: text})
		}
	}
	switch {
	case jailed != nil && jailed.cg != nil:
		jailed.cg.killOnOOM(pr.exited)
	case jailed != nil && pr.spec.MemoryMB > 0:
		go pr.pool.watchMemory(pgid, pr.spec.MemoryMB, pr.exited, pr.log, func(text string) {
			pr.fn.retire(pr)
			say(text)
		})
	}
	go func() {
		err := cmd.Wait()
		pr.fn.retire(pr)
		if jailed != nil && jailed.cg != nil && jailed.cg.oomKills() > 0 {
			pr.log.Warn("Warning: function process killed: over its memory_mb", "pid", pgid, "memory_mb", pr.spec.MemoryMB)
			say(overMemory(pr.spec.MemoryMB))
		}
		// Whatever the wrapper forked dies with it, however it ended.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		forgetGroup(runDir, pgid)
		pr.pool.procs.Delete(pr.addr)
		_ = os.Remove(pr.sock)
		if jailed != nil {
			pr.pool.jail.cleanup(jailed)
		}
		// The last lines (a crash's traceback) are in the tail before anyone looks; a
		// daemon that keeps the pipes open does not hold the process's end (it is killed
		// with its user when the function goes).
		drained, cancel := context.WithTimeout(context.Background(), pipeDrain)
		for _, lp := range []*logPipe{stdout, stderr} {
			select {
			case <-lp.done:
			case <-drained.Done():
			}
		}
		cancel()
		pr.mu.Lock()
		pr.exitErr = err
		pr.mu.Unlock()
		close(pr.exited)
	}()
	return nil
}

// command is how the process runs: in its own group (stopping the function kills whatever
// it forked), killed with sless dev (Pdeathsig), and jailed (jailed set) when the pool can.
// Its socket is bound by the pool, in a directory only the pool reaches, and handed over as
// descriptor 3: the process listens on it (so the listener's credentials are its own, which
// the pool's dial checks) but has no path it could rename or point elsewhere.
func (pr *process) command() (cmd *exec.Cmd, jailed *launch, err error) {
	art := pr.spec.Artifact
	argv := command(art)
	sock, err := bindSocket(pr.sock)
	if err != nil {
		return nil, nil, err
	}
	env := processEnv(pr.spec, true)
	if j := pr.pool.jail; j != nil {
		l, err := j.launch(context.Background(), pr.addr, art.Dir, argv, pr.fn.sb, jailRoot{TmpMB: tmpMB(pr.spec), Files: pr.spec.Files}, jailEnv(env), processLimits{MemoryMB: pr.spec.MemoryMB})
		if err != nil {
			sock.Close()
			return nil, nil, err
		}
		l.cmd.ExtraFiles = []*os.File{sock}
		return l.cmd, l, nil
	}
	cmd = exec.Command(argv[0], argv[1:]...)
	cmd.Dir = art.Dir
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd, nil, nil
}

// listenFD is the descriptor a process finds its socket on (the first of ExtraFiles).
const listenFD = 3

// bindSocket binds a Unix stream socket at path, not yet listening, for a process to
// listen on. Only the pool opens it: the directory is the pool's alone.
func bindSocket(path string) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket for %s: %w", path, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// checkPeer makes sure conn reached pr itself: the socket's listener was made by pr's
// process (SO_PEERCRED holds the credentials of the process that called listen) and, when
// sandboxed, as its function's user.
func (pr *process) checkPeer(conn *net.UnixConn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) { cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("reading who listens on %s: %w", pr.addr, credErr)
	}
	uid := os.Geteuid()
	if pr.fn.sb != nil {
		uid = pr.fn.sb.uid
	}
	if pid := pr.pid(); int(cred.Pid) != pid || int(cred.Uid) != uid {
		return &net.OpError{Op: "dial", Net: "unix", Err: fmt.Errorf("function %s: %w: its process %d (user %d), found process %d (user %d)", pr.fn.key, errNotTheProcess, pid, uid, cred.Pid, cred.Uid)}
	}
	return nil
}

// errNotTheProcess is a socket that leads somewhere else than its process: nothing is sent
// there, and the process is taken out of service like one whose socket is gone.
var errNotTheProcess = errors.New("the socket is not listened on by the process it was made for")

// tmpMB sizes a jail's /tmp (and /dev/shm): memory, as a tmpfs is.
func tmpMB(spec Spec) int {
	if spec.MemoryMB > 0 {
		return spec.MemoryMB
	}
	return 128
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
// functions), the runtime's settings, the function's env vars, then the wrapper contract
// (listen: its socket is descriptor listenFD).
func processEnv(spec Spec, listen bool) []string {
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
	if listen {
		env = append(env, "SLESS_LISTEN_FD="+strconv.Itoa(listenFD))
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

// pipeDrain bounds the wait for a process's output after it exited.
const pipeDrain = time.Second

// memoryPoll is how often the resident memory of a sandboxed process and its children is
// compared with its memory_mb where no control group holds it.
const memoryPoll = 50 * time.Millisecond

// watchMemory kills the process group of pid once the process and its children hold more
// than memoryMB, until exited is closed, and says so through log and through say, which is
// called just before the kill: the fallback where the machine has no control groups.
func (p *Pool) watchMemory(pid, memoryMB int, exited <-chan struct{}, log *slog.Logger, say func(string)) {
	limit := int64(memoryMB) << 20
	t := time.NewTicker(memoryPoll)
	defer t.Stop()
	for {
		select {
		case <-exited:
			return
		case <-t.C:
		}
		rss := treeRSS(pid, 0)
		if rss <= limit {
			continue
		}
		log.Warn("Warning: function process killed: over its memory_mb", "pid", pid, "resident_mib", rss>>20, "memory_mb", memoryMB)
		say(overMemory(memoryMB))
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return
	}
}

// overMemory is the line a function's log gets when its process went over memory_mb.
func overMemory(memoryMB int) string {
	return fmt.Sprintf("[sless] killed: the function's processes went over its memory_mb of %d", memoryMB)
}

// treeRSS is the memory of pid and its descendants, in bytes (0 once it is gone): their
// proportional set sizes, so that what forked children share is counted once, as a cgroup
// would.
func treeRSS(pid, depth int) int64 {
	total := pss(pid)
	if depth > 16 {
		return total
	}
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, task := range tasks {
		children, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/children")
		for _, c := range strings.Fields(string(children)) {
			if child, err := strconv.Atoi(c); err == nil {
				total += treeRSS(child, depth+1)
			}
		}
	}
	return total
}

// pss is the proportional set size of pid in bytes (its resident size where the kernel
// has no smaps_rollup).
func pss(pid int) int64 {
	proc := "/proc/" + strconv.Itoa(pid)
	if data, err := os.ReadFile(proc + "/smaps_rollup"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "Pss:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				return kb << 10
			}
		}
	}
	statm, err := os.ReadFile(proc + "/statm")
	if err != nil {
		return 0
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(statm), &size, &resident); err != nil {
		return 0
	}
	return resident * int64(os.Getpagesize())
}

// tailBuffer keeps the last n bytes written.
type tailBuffer struct {
	mu   sync.Mutex
	n    int
	buf  []byte
	cut  bool // bytes before buf were dropped
	mask *rules.SecretMasker
}

func newTailBuffer(n int, mask *rules.SecretMasker) *tailBuffer {
	return &tailBuffer{n: n, mask: mask}
}

func (t *tailBuffer) Write(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.n; over > 0 {
		t.buf, t.cut = append(t.buf[:0], t.buf[over:]...), true
	}
}

// String is the tail masked; once bytes were dropped its first line goes too, as it may
// begin inside a value the masker cannot match.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if t.cut {
		_, b, _ = bytes.Cut(b, []byte("\n"))
	}
	return t.mask.Mask(string(bytes.TrimSpace(b)))
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

// releasingConn is the releasingBody of an upgraded connection (101 Switching Protocols):
// ReverseProxy writes the caller's side into it, so it stays a writer. The process is held
// until the connection closes, as for a stream.
type releasingConn struct {
	*releasingBody
	io.Writer
}

// releasing is resp's body, releasing the process once closed.
func releasing(resp *http.Response, release func()) io.ReadCloser {
	b := &releasingBody{ReadCloser: resp.Body, release: release}
	if w, ok := resp.Body.(io.Writer); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		return releasingConn{b, w}
	}
	return b
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
