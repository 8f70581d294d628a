package pool

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sless.dev/sless/buildkit"
)

// BuildOptions bound the builds a sandboxed pool runs: a tenant's installers and compilers
// (pip's setup.py, npm's lifecycle scripts, go generate's tools) run what the tenant
// uploaded.
type BuildOptions struct {
	// CacheDir holds each tenant's build caches (downloaded modules, compiler output)
	// across builds, one directory per tenant. Required for BuildSandbox.
	CacheDir string
	// Layers are directories the platform filled (the Go standard library's compiled
	// packages), each shown read-only under the tenant cache's subdirectory of the same
	// name, beneath the tenant's own writes (overlayfs).
	Layers map[string]string
	// MemoryMB caps a build step and everything it forks. Default 2048.
	MemoryMB int
	// CPUs caps a build step's CPU time. Default half the machine's, at least one.
	CPUs float64
}

func (o BuildOptions) withDefaults() BuildOptions {
	if o.MemoryMB <= 0 {
		o.MemoryMB = 2048
	}
	if o.CPUs <= 0 {
		o.CPUs = max(1, float64(runtime.NumCPU())/2)
	}
	return o
}

// buildSandbox runs tenants' build steps in jails: each tenant's builds as a user of its
// own (kept for the pool's life, so its caches stay its own), one build of a tenant at a time,
// seeing the build's directory, its caches, the toolchain and the system's programs only,
// on the functions' network rules, within BuildOptions' limits.
type buildSandbox struct {
	p    *Pool
	opts BuildOptions

	mu      sync.Mutex
	tenants map[string]*buildTenant
}

type buildTenant struct {
	busy sync.Mutex // one build of the tenant at a time: Enter to Leave
	sb   *sandbox
	// cacheOwned: the cache belongs to sb's user (checked once per pool).
	cacheOwned bool
}

var _ buildkit.Sandbox = (*buildSandbox)(nil)

// BuildSandbox is where this pool runs build steps, or nil when it runs functions
// unsandboxed (then builds run as the pool's user, as its functions do).
func (p *Pool) BuildSandbox() buildkit.Sandbox {
	if p.jail == nil || p.opts.Build.CacheDir == "" {
		return nil
	}
	return p.builds
}

func (s *buildSandbox) tenant(name string) (*buildTenant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tenants[name]; t != nil {
		return t, nil
	}
	sb, err := s.p.jail.sandbox("build/" + name)
	if err != nil {
		return nil, fmt.Errorf("a build user for %s: %w", name, err)
	}
	t := &buildTenant{sb: sb}
	s.tenants[name] = t
	return t, nil
}

// close gives the tenants' build users back.
func (s *buildSandbox) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, t := range s.tenants {
		s.p.jail.release(t.sb)
		delete(s.tenants, name)
	}
}

// Enter waits for the tenant's other build to end, then hands dir and the tenant's cache to
// its build user.
func (s *buildSandbox) Enter(tenant, dir string) error {
	t, err := s.tenant(tenant)
	if err != nil {
		return err
	}
	t.busy.Lock()
	cache := filepath.Join(s.opts.CacheDir, tenant)
	if !t.cacheOwned {
		if err := ownCache(cache, t.sb.uid, s.opts.Layers); err != nil {
			t.busy.Unlock()
			return fmt.Errorf("the build cache of %s: %w", tenant, err)
		}
		t.cacheOwned = true
	}
	if err := chownTree(dir, t.sb.uid, nil); err != nil {
		t.busy.Unlock()
		return fmt.Errorf("handing %s to the build: %w", dir, err)
	}
	return nil
}

// Leave kills what the tenant's steps left running and takes dir back: owned by the pool,
// without set-ID bits and writable by none but its owner, so nothing the build left can
// change it or lead the pool's own writes elsewhere.
func (s *buildSandbox) Leave(tenant, dir string) error {
	s.mu.Lock()
	t := s.tenants[tenant]
	s.mu.Unlock()
	if t == nil {
		return fmt.Errorf("no build of %s to leave", tenant)
	}
	defer t.busy.Unlock()
	if err := killUser(t.sb.uid); err != nil {
		return err
	}
	return chownTree(dir, os.Geteuid(), func(m fs.FileMode) fs.FileMode { return m &^ (fs.ModeSetuid | fs.ModeSetgid | 0o022) })
}

// RunStep runs one step in the tenant's jail and waits for it; what it forks dies with it.
func (s *buildSandbox) RunStep(ctx context.Context, step buildkit.Step) error {
	s.mu.Lock()
	t := s.tenants[step.Tenant]
	s.mu.Unlock()
	if t == nil {
		return fmt.Errorf("build step for %s outside Enter", step.Tenant)
	}
	var binds []string
	if step.Toolchain != "" && !inSystemPaths(step.Toolchain) {
		binds = append(binds, step.Toolchain)
	}
	jr := jailRoot{Binds: binds, Writable: []string{step.Dir}, TmpMB: s.opts.MemoryMB,
		Cache: &jailCache{Dir: filepath.Join(s.opts.CacheDir, step.Tenant), Layers: s.opts.Layers}}
	name := "build" + fmt.Sprint(s.p.seq.Add(1))
	l, err := s.p.jail.launch(ctx, name, step.Cwd, step.Argv, t.sb, jr, step.Env, processLimits{MemoryMB: s.opts.MemoryMB, CPUs: s.opts.CPUs})
	if err != nil {
		return err
	}
	defer s.p.jail.cleanup(l)
	l.cmd.Stdout, l.cmd.Stderr = step.Output, step.Output
	l.cmd.Cancel = func() error { return syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL) }
	l.cmd.WaitDelay = time.Second
	if err := s.p.jail.start(l); err != nil {
		return fmt.Errorf("starting %s: %w", step.Argv[0], err)
	}
	exited := make(chan struct{})
	if l.cg != nil {
		l.cg.killOnOOM(exited)
	}
	err = l.cmd.Wait()
	close(exited)
	if l.cg != nil && l.cg.oomKills() > 0 {
		return fmt.Errorf("%w (the build went over its memory limit of %d MiB)", err, s.opts.MemoryMB)
	}
	return err
}

// ownCache makes dir (and the upper directories of layers) the tenant's build user's,
// creating it on first use.
func ownCache(dir string, uid int, layers map[string]string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, lower := range layers {
		if err := os.MkdirAll(lower, 0o755); err != nil { // the platform fills it, maybe later
			return err
		}
		for _, d := range []string{filepath.Join(dir, name), filepath.Join(dir, ".upper-"+name), filepath.Join(dir, ".work-"+name)} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return err
			}
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err == nil && int(st.Uid) == uid {
		return nil
	}
	return chownTree(dir, uid, nil)
}

// chownTree gives everything under dir to uid (gid the same) without following links, and
// changes modes by mode (nil: kept; links are left).
func chownTree(dir string, uid int, mode func(fs.FileMode) fs.FileMode) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, uid, uid); err != nil {
			return err
		}
		if mode == nil || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if m := mode(info.Mode()); m != info.Mode() {
			return os.Chmod(p, m&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
		}
		return nil
	})
}
