package pool

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	// Tasks caps the processes and threads of one function (all its revisions and
	// processes together). Default 1024.
	Tasks int
	// Hide are directories no function sees even where a system path (/opt, /etc) would show
	// them: the data directory, the build directory.
	Hide []string
	// Network is what functions reach on the network (default: a namespace of their own
	// with outbound connections to public addresses only).
	Network NetworkOptions
}

// jailer starts function processes in jails (jail.go): a user of their own, a mount
// namespace showing the system's programs, their build and a private /tmp only, and the
// kernel's limits (cgroup.go).
type jailer struct {
	opts   SandboxOptions
	thread *jailThread
	// base holds the jails' roots, mounted in the thread's namespace only.
	base    string
	lockDir string
	// cg holds the sandboxes' control groups; nil where the machine has none to give (cgErr
	// says why): then RLIMIT_NPROC and polling bound them.
	cg    *cgroupRoot
	cgErr error
	// net makes the sandboxes' network namespaces; nil on the machine's network (netWhy says
	// why a mode was not had).
	net    *networker
	netWhy string

	mu    sync.Mutex
	next  int
	held  map[int]*os.File // uid → its lock, held while in use
	boxes map[string]*sandbox
}

// A sandbox is what the processes of one function share across its revisions — or of one
// job run, or of one tenant's builds: a user no other function of this machine has and,
// where the machine has them, a control group capped at SandboxOptions.Tasks.
type sandbox struct {
	name string
	refs int
	uid  int
	cg   *cgroup
	// net is its network namespace, made at its first start.
	netMu sync.Mutex
	net   *netNamespace
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
	// Each pool scans the users from a random one: pools on one machine do not queue on the
	// same first locks, and a crashed pool's user (and what it left running) stays as it was
	// until a restart on its data directory kills that by its records, rarely by a stranger.
	j := &jailer{opts: opts, base: filepath.Join(sockDir, "roots"), next: rand.IntN(SandboxUIDs), held: map[int]*os.File{}, boxes: map[string]*sandbox{}}
	if err := os.Mkdir(j.base, 0o700); err != nil {
		return nil, err
	}
	lockDir, err := SandboxLockDir()
	if err != nil {
		return nil, err
	}
	j.lockDir = lockDir
	j.cg, j.cgErr = newCgroupRoot()
	t, err := startJailThread()
	if err != nil {
		return nil, err
	}
	j.thread = t
	if err := t.run(func() error { return shareBase(j.base) }); err != nil {
		t.stop()
		return nil, err
	}
	if j.net, j.netWhy, err = newNetworker(opts.Network, sockDir, t); err != nil {
		t.stop()
		return nil, err
	}
	if j.net != nil && j.net.slirp != "" {
		// slirp4netns must work here; where it does not, functions get no outbound network.
		nn, err := j.net.make(t)
		if err != nil {
			j.net.opts.Mode, j.net.slirp, j.net.resolv, j.netWhy = NetworkNone, "", "", err.Error()
		} else {
			nn.close()
		}
	}
	if err := j.probe(); err != nil {
		t.stop()
		return nil, fmt.Errorf("a test sandbox failed: %w", err)
	}
	return j, nil
}

// Network says what sandboxed functions reach on the network and, when it is less than
// asked for, why.
func (j *jailer) Network() string {
	if j.netWhy != "" {
		return j.net.Describe() + " (" + j.netWhy + ")"
	}
	return j.net.Describe()
}

// Limits says what holds a sandbox's memory and tasks: the kernel's control groups, or
// polling and a per-user process limit where the machine has none to give (and why).
func (j *jailer) Limits() string {
	if j.cg != nil {
		return j.cg.Kind()
	}
	return fmt.Sprintf("polled memory and a per-user process limit (no cgroups: %v)", j.cgErr)
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
	sb, err := j.sandbox("probe")
	if err != nil {
		return err
	}
	defer j.release(sb)
	for _, t := range []string{"/usr/bin/true", "/bin/true"} {
		if _, err := os.Stat(t); err != nil {
			continue
		}
		l, err := j.launch(context.Background(), "probe", "/", []string{t}, sb, jailRoot{TmpMB: 1}, nil, processLimits{MemoryMB: 16})
		if err != nil {
			return err
		}
		defer j.cleanup(l)
		var out bytes.Buffer
		l.cmd.Stdout, l.cmd.Stderr = &out, &out
		if err := j.start(l); err != nil {
			return err
		}
		if err := l.cmd.Wait(); err != nil {
			return fmt.Errorf("%v %s", err, strings.TrimSpace(out.String()))
		}
		return nil
	}
	return nil
}

// launch is one jailed process to start: its command, the root it runs in and the control
// group it is born in (nil without cgroups).
type launch struct {
	cmd  *exec.Cmd
	root string
	jail jailRoot
	sb   *sandbox
	cg   *cgroup
}

// launch is argv run from the build in dir in sb, in a jail named name (unique in the pool)
// with jr's root and its own control group of limits l; the interpreter's installation is
// shown when it lies outside the system paths. ctx kills it. cleanup undoes it.
func (j *jailer) launch(ctx context.Context, name, dir string, argv []string, sb *sandbox, jr jailRoot, env []string, l processLimits) (*launch, error) {
	argv = append([]string(nil), argv...)
	if real, err := filepath.EvalSymlinks(argv[0]); err == nil {
		argv[0] = real
	}
	if dir != "/" && !slices.ContainsFunc(jr.Writable, func(w string) bool { return dir == w || strings.HasPrefix(dir, w+"/") }) {
		jr.Binds = append(jr.Binds, dir)
	}
	if !strings.HasPrefix(argv[0], dir+"/") {
		if prefix := interpreterPrefix(argv[0]); prefix != "" {
			jr.Binds = append(jr.Binds, prefix)
		}
	}
	jr.Hide, jr.UID = j.opts.Hide, sb.uid
	if j.net != nil {
		jr.ResolvConf = j.net.resolv
	}
	root := filepath.Join(j.base, name)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true, Pdeathsig: syscall.SIGKILL,
		Cloneflags: syscall.CLONE_NEWNS, Chroot: root,
		Credential: &syscall.Credential{Uid: uint32(sb.uid), Gid: uint32(sb.uid), Groups: []uint32{}},
	}
	out := &launch{cmd: cmd, root: root, jail: jr, sb: sb}
	if sb.cg != nil {
		cg, err := sb.cg.process(l)
		if err != nil {
			return nil, err
		}
		out.cg = cg
	}
	return out, nil
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

// start builds l's root and starts it from the jail thread, into its control group and
// network namespace.
func (j *jailer) start(l *launch) error {
	nn, err := j.network(l.sb)
	if err != nil {
		return err
	}
	return j.thread.run(func() error {
		if err := os.Mkdir(l.root, 0o755); err != nil {
			return err
		}
		if err := l.jail.build(l.root); err != nil {
			removeRoot(l.root)
			return err
		}
		var err error
		if nn != nil {
			err = nn.enter(j.net.host, func() error { return j.fork(l) })
		} else {
			err = j.fork(l)
		}
		if err != nil {
			removeRoot(l.root)
		}
		return err
	})
}

// fork starts l's process (on the jail thread) in its control group, or under the per-user
// process limit where there is none.
func (j *jailer) fork(l *launch) error {
	if l.cg != nil {
		leave, err := l.cg.enter(l.cmd.SysProcAttr)
		if err != nil {
			return err
		}
		defer leave()
		return l.cmd.Start()
	}
	nprocMu.Lock()
	defer nprocMu.Unlock()
	if err := setTasks(j.opts.Tasks); err != nil {
		return fmt.Errorf("process limit: %w", err)
	}
	return l.cmd.Start()
}

// network is sb's network namespace, made at its first start; nil on the machine's network.
func (j *jailer) network(sb *sandbox) (*netNamespace, error) {
	if j.net == nil {
		return nil, nil
	}
	sb.netMu.Lock()
	defer sb.netMu.Unlock()
	if sb.net == nil {
		nn, err := j.net.make(j.thread)
		if err != nil {
			return nil, err
		}
		sb.net = nn
	}
	return sb.net, nil
}

// cleanup removes l's root and control group (killing what is left in it) once its process
// has exited.
func (j *jailer) cleanup(l *launch) {
	if l.cg != nil {
		l.cg.remove()
	}
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

// sandbox returns the sandbox called name, making it on first use (a user no function on
// this machine has, after killing whatever a crashed pool left running as it, and its control
// group); each call is matched by a release.
func (j *jailer) sandbox(name string) (*sandbox, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if sb := j.boxes[name]; sb != nil {
		sb.refs++
		return sb, nil
	}
	uid, err := j.acquireLocked()
	if err != nil {
		return nil, err
	}
	sb := &sandbox{name: name, refs: 1, uid: uid}
	if j.cg != nil {
		if sb.cg, err = j.cg.group(j.opts.Tasks); err != nil {
			j.held[uid].Close()
			delete(j.held, uid)
			return nil, err
		}
	}
	j.boxes[name] = sb
	return sb, nil
}

func (j *jailer) acquireLocked() (int, error) {
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

// release gives sb back after its last user: what still runs in it (a daemon that left its
// process group) is killed and its user freed.
func (j *jailer) release(sb *sandbox) {
	j.mu.Lock()
	if sb.refs--; sb.refs > 0 {
		j.mu.Unlock()
		return
	}
	delete(j.boxes, sb.name)
	j.mu.Unlock()
	if sb.cg != nil {
		sb.cg.remove()
	}
	_ = killUser(sb.uid)
	if sb.net != nil {
		sb.net.close()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if f := j.held[sb.uid]; f != nil {
		f.Close()
		delete(j.held, sb.uid)
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
