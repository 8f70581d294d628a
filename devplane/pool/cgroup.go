package pool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Sandboxed processes are held to their limits by the kernel's control groups wherever the
// machine has the memory and pids controllers, on cgroup v2 or v1 (containerd/cgroups speaks
// both): one group per function — all its revisions, its processes and everything they fork,
// whatever session or process group they move to — capped at SandboxOptions.Tasks tasks, and
// inside it one group per process capped at its memory_mb (and CPU time, for builds). A
// process is born into its group: on v2 by clone3's CLONE_INTO_CGROUP
// (SysProcAttr.UseCgroupFD), on v1 by moving the jail thread that forks it into the group for
// the fork and back after it, so nothing it runs can fork before the limits hold. Without
// these controllers the pool falls back to RLIMIT_NPROC per user and to polling each process
// tree's memory (watchMemory).

const cgroupMount = "/sys/fs/cgroup"

// cgroupRoot is this pool's subtree: on v2 the hierarchy's sless/<pid>-<n> (v2 allows no
// processes in a group with children, so it stays apart from the pool's own group), on v1 a
// child sless-<pid>-<n> of the pool's own group in each hierarchy.
type cgroupRoot struct {
	v2   bool
	base string
	// home is the pool's own group (v1), where the jail thread returns after a fork; own its
	// path in each hierarchy (read once: cgroup1.NestedPath parses /proc on every call).
	home cgroup1.Cgroup
	own  map[cgroup1.Name]string
	// subsystems are the v1 hierarchies in use (read once, as own).
	subsystems []cgroup1.Subsystem
	// swap: memory + swap can be limited too (v1 with swap accounting).
	swap bool
	// cpu: the CPU controller is there as well (optional).
	cpu bool
	seq atomic.Int64
}

// v1Hierarchy are the hierarchies sless uses on cgroup v1: memory and pids, and cpu where
// it is mounted.
func v1Hierarchy() ([]cgroup1.Subsystem, error) {
	all, err := cgroup1.Default()
	if err != nil {
		return nil, err
	}
	var out []cgroup1.Subsystem
	for _, s := range all {
		if s.Name() == cgroup1.Memory || s.Name() == cgroup1.Pids || s.Name() == cgroup1.Cpu {
			out = append(out, s)
		}
	}
	return out, nil
}

var cgroupSeq atomic.Int64

// newCgroupRoot makes this pool's subtree, after removing what pools of this machine that
// are gone left behind (killing what still runs there).
func newCgroupRoot() (*cgroupRoot, error) {
	name := fmt.Sprintf("%d-%d", os.Getpid(), cgroupSeq.Add(1))
	switch cgroups.Mode() {
	case cgroups.Unified:
		r := &cgroupRoot{v2: true, base: "/sless/" + name}
		ctrl, err := os.ReadFile(filepath.Join(cgroupMount, "cgroup.controllers"))
		if err != nil {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
		have := strings.Fields(string(ctrl))
		if !contains(have, "memory") || !contains(have, "pids") {
			return nil, fmt.Errorf("cgroup v2 without the memory and pids controllers (has %s)", strings.Join(have, ", "))
		}
		r.cpu = contains(have, "cpu")
		reapCgroups(filepath.Join(cgroupMount, "sless"), "")
		if _, err := cgroup2.NewManager(cgroupMount, r.base, r.v2Resources(&specs.LinuxResources{Pids: &specs.LinuxPids{}})); err != nil {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
		return r, nil
	case cgroups.Legacy, cgroups.Hybrid:
		home, err := cgroup1.Load(cgroup1.NestedPath(""), cgroup1.WithHierarchy(v1Hierarchy))
		if err != nil {
			return nil, fmt.Errorf("cgroup v1: %w", err)
		}
		r := &cgroupRoot{base: "sless-" + name, home: home, own: map[cgroup1.Name]string{}, subsystems: home.Subsystems()}
		for _, s := range home.Subsystems() {
			if r.own[s.Name()], err = cgroup1.NestedPath("")(s.Name()); err != nil {
				return nil, fmt.Errorf("cgroup v1: %w", err)
			}
		}
		for _, s := range home.Subsystems() {
			dir := r.v1Dir(s.Name(), "")
			reapCgroups(dir, "sless-")
			switch s.Name() {
			case cgroup1.Memory:
				_, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes"))
				r.swap = err == nil
			case cgroup1.Cpu:
				r.cpu = true
			}
		}
		if !hasSubsystems(home, cgroup1.Memory, cgroup1.Pids) {
			return nil, errors.New("cgroup v1 without both the memory and pids hierarchies")
		}
		if _, err := cgroup1.New(r.v1Path(r.base), &specs.LinuxResources{}, r.v1Hierarchy()); err != nil {
			return nil, fmt.Errorf("cgroup v1: %w", err)
		}
		return r, nil
	}
	return nil, errors.New("no cgroup hierarchy is mounted")
}

func hasSubsystems(c cgroup1.Cgroup, names ...cgroup1.Name) bool {
	n := 0
	for _, s := range c.Subsystems() {
		for _, want := range names {
			if s.Name() == want {
				n++
			}
		}
	}
	return n == len(names)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (r *cgroupRoot) v1Hierarchy() cgroup1.InitOpts {
	return cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return r.subsystems, nil })
}

// v1Path is the group at path below the pool's own group.
func (r *cgroupRoot) v1Path(path string) cgroup1.Path {
	return func(n cgroup1.Name) (string, error) {
		own, ok := r.own[n]
		if !ok {
			return "", cgroup1.ErrControllerNotActive
		}
		return filepath.Join(own, path), nil
	}
}

// v1Dir is the directory of the group at path (below the pool's own group) in hierarchy n.
func (r *cgroupRoot) v1Dir(n cgroup1.Name, path string) string {
	return filepath.Join(cgroupMount, string(n), r.own[n], path)
}

// v2Resources drops what the machine cannot limit (cpu without the controller).
func (r *cgroupRoot) v2Resources(res *specs.LinuxResources) *cgroup2.Resources {
	if !r.cpu {
		res.CPU = nil
	}
	return cgroup2.ToResources(res)
}

// Kind says which limits are in force, for the banner.
func (r *cgroupRoot) Kind() string {
	if r.v2 {
		return "cgroup v2"
	}
	return "cgroup v1"
}

// reapCgroups removes the subtrees <prefix><pid>-<n> in dir whose pool process is gone,
// killing what still runs in them.
func reapCgroups(dir, prefix string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		pid, err := strconv.Atoi(strings.Split(rest, "-")[0])
		if !ok || !e.IsDir() || err != nil || pid == os.Getpid() || unix.Kill(pid, 0) == nil {
			continue
		}
		killTree(filepath.Join(dir, e.Name()))
	}
}

// killTree kills every process of the group at dir and below and removes the groups,
// deepest first.
func killTree(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			killTree(filepath.Join(dir, e.Name()))
		}
	}
	killProcs(dir)
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		time.Sleep(10 * time.Millisecond) // a killed process leaves its group a moment later
		_ = unix.Rmdir(dir)
	}
}

// killProcs kills the processes of the group at dir until none is left: what one forks
// meanwhile is in the group too, and its task limit bounds the rounds.
func killProcs(dir string) {
	for range 500 {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		pids := strings.Fields(string(data))
		if err != nil || len(pids) == 0 {
			return
		}
		for _, f := range pids {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cgroup is one group of the pool's subtree.
type cgroup struct {
	root *cgroupRoot
	path string // below the pool's own group (v1) or the hierarchy's root (v2)
	v1   cgroup1.Cgroup
}

// group makes a group of the pool's subtree for one function (or job run or build), capped
// at tasks tasks.
func (r *cgroupRoot) group(tasks int) (*cgroup, error) {
	limit := int64(tasks)
	return r.make(r.base+"/f"+strconv.FormatInt(r.seq.Add(1), 10), &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &limit}})
}

// processLimits are what one process (and all it forks) may use: memory in MiB (0: only
// its function's tasks bound it) and CPUs (0: no cap).
type processLimits struct {
	MemoryMB int
	CPUs     float64
}

// process makes a group in g for one process.
func (g *cgroup) process(l processLimits) (*cgroup, error) {
	res := &specs.LinuxResources{}
	if l.MemoryMB > 0 {
		limit := int64(l.MemoryMB) << 20
		res.Memory = &specs.LinuxMemory{Limit: &limit}
		if g.root.swap {
			res.Memory.Swap = &limit // memory + swap: swapping out does not lift it
		}
	}
	if l.CPUs > 0 {
		period, quota := uint64(100_000), int64(l.CPUs*100_000)
		res.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	return g.root.make(g.path+"/p"+strconv.FormatInt(g.root.seq.Add(1), 10), res)
}

func (r *cgroupRoot) make(path string, res *specs.LinuxResources) (*cgroup, error) {
	if r.v2 {
		if _, err := cgroup2.NewManager(cgroupMount, path, r.v2Resources(res)); err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", path, err)
		}
		g := &cgroup{root: r, path: path}
		if res.Memory != nil {
			// Over memory_mb the whole instance goes, as on v1 (oomWatch), not one of its
			// processes.
			if err := os.WriteFile(g.file("memory.oom.group"), []byte("1"), 0o644); err != nil {
				g.remove()
				return nil, fmt.Errorf("cgroup %s: %w", path, err)
			}
		}
		return g, nil
	}
	if !r.cpu {
		res.CPU = nil
	}
	c, err := cgroup1.New(r.v1Path(path), res, r.v1Hierarchy())
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	return &cgroup{root: r, path: path, v1: c}, nil
}

// file is a control file of the group: on v1 in the memory hierarchy.
func (g *cgroup) file(name string) string {
	if g.root.v2 {
		return filepath.Join(cgroupMount, g.path, name)
	}
	return filepath.Join(g.root.v1Dir(cgroup1.Memory, g.path), name)
}

// remove kills every process left in the group and below, and removes it.
func (g *cgroup) remove() {
	if g.root.v2 {
		killTree(filepath.Join(cgroupMount, g.path))
		return
	}
	for _, s := range g.v1.Subsystems() {
		killTree(g.root.v1Dir(s.Name(), g.path))
	}
}

// oomKills is how many processes of the group the kernel killed for its memory limit.
func (g *cgroup) oomKills() int {
	name := "memory.oom_control" // v1
	if g.root.v2 {
		name = "memory.events"
	}
	data, _ := os.ReadFile(g.file(name))
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.Atoi(rest)
			return n
		}
	}
	return 0
}

// killOnOOM kills the whole group once the kernel killed one of its processes for the
// group's memory limit, until done closes: v1's out-of-memory kill takes one process, and an
// instance over its memory_mb goes whole, as v2's memory.oom.group has it.
func (g *cgroup) killOnOOM(done <-chan struct{}) {
	if g.root.v2 {
		return
	}
	fd, err := g.v1.OOMEventFD()
	if err != nil {
		return
	}
	_ = unix.SetNonblock(int(fd), true) // so Close ends a Read in progress
	f := os.NewFile(fd, "oom-event")
	go func() {
		<-done
		f.Close()
	}()
	go func() {
		var b [8]byte
		if _, err := f.Read(b[:]); err == nil && g.oomKills() > 0 {
			killProcs(g.root.v1Dir(cgroup1.Memory, g.path))
		}
	}()
}

// enter prepares cmd, about to be started from the calling thread (the jail thread), to be
// born in g; leave undoes what enter did to the thread once cmd has started.
func (g *cgroup) enter(attr *syscall.SysProcAttr) (leave func(), err error) {
	if g.root.v2 {
		f, err := os.Open(filepath.Join(cgroupMount, g.path))
		if err != nil {
			return nil, err
		}
		attr.UseCgroupFD, attr.CgroupFD = true, int(f.Fd())
		return func() { f.Close() }, nil
	}
	tid := uint64(unix.Gettid())
	if err := g.v1.AddTask(cgroup1.Process{Pid: int(tid)}); err != nil {
		return nil, fmt.Errorf("entering cgroup %s: %w", g.path, err)
	}
	return func() { _ = g.root.home.AddTask(cgroup1.Process{Pid: int(tid)}) }, nil
}
