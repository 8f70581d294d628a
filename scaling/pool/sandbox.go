package pool

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Sandbox users: each function (and each job run) gets one of these uids (the same number as
// its gid) for as long as it is deployed. The range lies above systemd-nspawn's container
// ranges (which end at 1,879,048,191) and below 2^31.
const (
	FirstSandboxUID = 2_000_000_000
	SandboxUIDs     = 65536
)

// SandboxOptions tunes the isolation of function processes.
type SandboxOptions struct {
	// Off runs every function as the user of the pool even where a sandbox is possible.
	Off bool
	// Tasks caps the processes and threads of one function's user (all its processes
	// together). Default 1024.
	Tasks int
	// Hide are directories no function sees even where a system path (/opt, /etc) would show
	// them: the data directory, the build directory.
	Hide []string
}

// jailer starts function processes in jails (jail.go): a user of their own, a mount
// namespace showing the system's programs, their build and a private /tmp only.
type jailer struct {
	opts   SandboxOptions
	thread *jailThread
	// base holds the jails' roots, mounted in the thread's namespace only.
	base    string
	lockDir string

	mu   sync.Mutex
	next int
	held map[int]*os.File // uid → its lock, held while in use
}

// newJailer checks that jails can be made here (root, mount namespaces) by running one.
func newJailer(opts SandboxOptions, sockDir string) (*jailer, error) {
	if opts.Off {
		return nil, errors.New("turned off")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("sless dev does not run as root")
	}
	if opts.Tasks <= 0 {
		opts.Tasks = 1024
	}
	j := &jailer{opts: opts, base: filepath.Join(sockDir, "roots"), held: map[int]*os.File{}}
	if err := os.Mkdir(j.base, 0o700); err != nil {
		return nil, err
	}
	lockDir, err := SandboxLockDir()
	if err != nil {
		return nil, err
	}
	j.lockDir = lockDir
	t, err := startJailThread()
	if err != nil {
		return nil, err
	}
	j.thread = t
	if err := t.run(func() error { return shareBase(j.base) }); err != nil {
		t.stop()
		return nil, err
	}
	if err := j.probe(); err != nil {
		t.stop()
		return nil, fmt.Errorf("a test sandbox failed: %w", err)
	}
	return j, nil
}

// SandboxLockDir is where sandbox users are locked while in use: one file per uid, flocked.
// The locks are shared by every pool on this machine, so no two functions get one user, and
// a pool that takes a user whose lock a dead pool left kills what still runs as it.
func SandboxLockDir() (string, error) {
	for _, dir := range []string{"/run/sless/uids", filepath.Join(os.TempDir(), "sless-uids")} {
		if os.MkdirAll(dir, 0o700) == nil {
			return dir, nil
		}
	}
	return "", errors.New("no directory for the sandbox users' locks")
}

// probe runs true in a jail.
func (j *jailer) probe() error {
	uid, err := j.acquire()
	if err != nil {
		return err
	}
	defer j.release(uid)
	for _, t := range []string{"/usr/bin/true", "/bin/true"} {
		if _, err := os.Stat(t); err != nil {
			continue
		}
		l := j.launch(context.Background(), "probe", "/", []string{t}, uid, jailRoot{TmpMB: 1}, nil)
		var out bytes.Buffer
		l.cmd.Stdout, l.cmd.Stderr = &out, &out
		if err := j.start(l); err != nil {
			return err
		}
		defer j.cleanup(l)
		if err := l.cmd.Wait(); err != nil {
			return fmt.Errorf("%v %s", err, strings.TrimSpace(out.String()))
		}
		return nil
	}
	return nil
}

// launch is one jailed process to start: its command and the root it runs in.
type launch struct {
	cmd  *exec.Cmd
	root string
	jail jailRoot
}

// launch is argv run from the build in dir as uid, in a jail named name (unique in the
// pool) with jr's root; the interpreter's installation is shown when it lies outside the
// system paths. ctx kills it.
func (j *jailer) launch(ctx context.Context, name, dir string, argv []string, uid int, jr jailRoot, env []string) *launch {
	argv = append([]string(nil), argv...)
	if real, err := filepath.EvalSymlinks(argv[0]); err == nil {
		argv[0] = real
	}
	if dir != "/" {
		jr.Binds = append(jr.Binds, dir)
	}
	if !strings.HasPrefix(argv[0], dir+"/") {
		if prefix := interpreterPrefix(argv[0]); prefix != "" {
			jr.Binds = append(jr.Binds, prefix)
		}
	}
	jr.Hide = j.opts.Hide
	root := filepath.Join(j.base, name)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true, Pdeathsig: syscall.SIGKILL,
		Cloneflags: syscall.CLONE_NEWNS, Chroot: root,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}},
	}
	return &launch{cmd: cmd, root: root, jail: jr}
}

// nprocMu keeps one jail's process limit in place until its fork: RLIMIT_NPROC is the
// pool's own (root ignores it), set just before each jailed start and inherited, hard limit
// included (else the function could raise it again). Without CAP_SYS_RESOURCE it cannot
// be raised after another pool lowered it: the lower limit then stays.
var nprocMu sync.Mutex

func setTasks(n int) error {
	want := unix.Rlimit{Cur: uint64(n), Max: uint64(n)}
	err := unix.Setrlimit(unix.RLIMIT_NPROC, &want)
	if errors.Is(err, unix.EPERM) {
		var cur unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NPROC, &cur) == nil && cur.Max < want.Max {
			cur.Cur = cur.Max
			return unix.Setrlimit(unix.RLIMIT_NPROC, &cur)
		}
	}
	return err
}

// start builds l's root and starts it from the jail thread.
func (j *jailer) start(l *launch) error {
	return j.thread.run(func() error {
		if err := os.Mkdir(l.root, 0o755); err != nil {
			return err
		}
		if err := l.jail.build(l.root); err != nil {
			removeRoot(l.root)
			return err
		}
		nprocMu.Lock()
		defer nprocMu.Unlock()
		if err := setTasks(j.opts.Tasks); err != nil {
			removeRoot(l.root)
			return fmt.Errorf("process limit: %w", err)
		}
		if err := l.cmd.Start(); err != nil {
			removeRoot(l.root)
			return err
		}
		return nil
	})
}

// cleanup removes l's root once its process has exited.
func (j *jailer) cleanup(l *launch) {
	_ = j.thread.run(func() error { removeRoot(l.root); return nil })
}

// jailEnv is env with the home and temporary directory inside the jail.
func jailEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "TMPDIR=") {
			out = append(out, kv)
		}
	}
	return append(out, "HOME=/tmp", "TMPDIR=/tmp")
}

// acquire takes a sandbox user no function on this machine has, after killing whatever a
// crashed pool left running as it.
func (j *jailer) acquire() (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := range SandboxUIDs {
		uid := FirstSandboxUID + (j.next+i)%SandboxUIDs
		if j.held[uid] != nil {
			continue
		}
		f, err := os.OpenFile(filepath.Join(j.lockDir, strconv.Itoa(uid)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return 0, fmt.Errorf("sandbox user lock: %w", err)
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			f.Close()
			continue
		}
		if err := killUser(uid); err != nil {
			f.Close()
			return 0, err
		}
		j.held[uid], j.next = f, (j.next+i+1)%SandboxUIDs
		return uid, nil
	}
	return 0, errors.New("every sandbox user is in use")
}

// release kills what still runs as uid (a daemon that left its process group) and gives
// the user back.
func (j *jailer) release(uid int) {
	_ = killUser(uid)
	j.mu.Lock()
	defer j.mu.Unlock()
	if f := j.held[uid]; f != nil {
		f.Close()
		delete(j.held, uid)
	}
}

// killUser kills every process of uid. The kill(-1) is sent by a process of that user, so
// a fork bomb cannot slip between a scan and the signals.
func killUser(uid int) error {
	if !userRuns(uid) {
		return nil
	}
	cmd := exec.Command("/proc/self/exe", strconv.Itoa(uid))
	cmd.Args[0] = killArg0
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("killing the processes of sandbox user %d: %v %s", uid, err, out)
	}
	return nil
}

// userRuns reports whether a process of uid (real) exists.
func userRuns(uid int) bool {
	ents, _ := os.ReadDir("/proc")
	want := strconv.Itoa(uid)
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		f, err := os.Open("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
				if fs := strings.Fields(rest); len(fs) > 0 && fs[0] == want {
					f.Close()
					return true
				}
				break
			}
		}
		f.Close()
	}
	return false
}

// killArg0 is argv[0] of the mode that kills every process of the user argv[1].
const killArg0 = "sless-jail-kill"

func init() {
	if len(os.Args) == 2 && os.Args[0] == killArg0 {
		uid, err := strconv.Atoi(os.Args[1])
		if err == nil {
			err = syscall.Setresuid(uid, uid, uid)
		}
		if err == nil {
			err = syscall.Kill(-1, syscall.SIGKILL)
			if errors.Is(err, syscall.ESRCH) {
				err = nil
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}
