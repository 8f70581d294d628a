package pool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// A jail is what one sandboxed process sees: a root of its own (a tmpfs) showing the
// system's programs read-only, its build read-only, a private /tmp and /dev/shm, a minimal
// /dev and its own processes in /proc; its socket comes as a descriptor, with no path.
// Roots are built by the pool itself, on one OS thread that has a mount namespace of its own
// (jailThread), and the process is started from that thread into a copy of it (CLONE_NEWNS),
// chrooted to its root and as its user: Go cannot run code between clone and exec, and re-executing the sless
// binary to do it there costs its package initialization (tens of ms) on every cold start.

// systemPaths are shown read-only in every jail when they exist (symbolic links, as on
// merged-/usr systems, are copied as links).
var systemPaths = []string{"/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// jailRoot describes the root of one jailed process.
type jailRoot struct {
	// Hide are covered with an empty tmpfs where a system path shows them (a data directory
	// under /opt); Binds are then shown read-only at their own paths: the build, an
	// interpreter's installation.
	Hide, Binds []string
	// Writable are shown read-write at their own paths (a build's directory), after Binds.
	Writable []string
	// Cache, when set, is a tenant's build cache shown read-write at jailCacheDir, with
	// read-only layers the platform filled under some of its subdirectories.
	Cache *jailCache
	// ResolvConf, when set, is shown as the jail's /etc/resolv.conf (its network
	// namespace's resolver).
	ResolvConf string
	// TmpMB sizes /tmp and /dev/shm.
	TmpMB int
	// Files are directories of files (Spec.Files) mounted read-only on a tmpfs each,
	// readable by UID only.
	Files map[string]map[string][]byte
	UID   int
}

// jailThread runs functions on one locked OS thread whose mount namespace holds the jails'
// roots, out of sight of the rest of the machine.
type jailThread struct {
	do      chan func()
	mu      sync.Mutex
	stopped bool
}

func startJailThread() (*jailThread, error) {
	t := &jailThread{do: make(chan func())}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, its namespace with it. Go
		// creates no other thread from a locked one, so nothing else inherits it.
		runtime.LockOSThread()
		err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS)
		if err == nil {
			err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		}
		errc <- err
		if err != nil {
			return
		}
		for f := range t.do {
			f()
		}
	}()
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("a mount namespace for the sandboxes: %w", err)
	}
	return t, nil
}

// run calls f on the thread.
func (t *jailThread) run(f func() error) error {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return errors.New("the sandbox thread has stopped")
	}
	done := make(chan error, 1)
	t.do <- func() { done <- f() }
	t.mu.Unlock()
	return <-done
}

func (t *jailThread) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		close(t.do)
	}
}

// shareBase makes base a mount of its own with shared propagation: a jail's copy of the
// namespace then loses the roots of other jails when the pool unmounts them, instead of
// keeping their tmpfs alive.
func shareBase(base string) error {
	if err := unix.Mount(base, base, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("jail base %s: %w", base, err)
	}
	if err := unix.Mount("", base, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("jail base %s: %w", base, err)
	}
	return nil
}

// build mounts the jail's root on the empty directory r.
func (c *jailRoot) build(r string) error {
	if err := unix.Mount("tmpfs", r, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("root tmpfs: %w", err)
	}
	for _, p := range systemPaths {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, r+p); err != nil {
				return err
			}
		case fi.IsDir():
			if err := bindRO(p, r+p); err != nil {
				return err
			}
		}
	}
	if err := bindLinked(r, "/etc/resolv.conf"); err != nil {
		return err
	}
	if c.ResolvConf != "" {
		if err := bindFileRO(c.ResolvConf, r, "/etc/resolv.conf"); err != nil {
			return err
		}
	}
	tmp := fmt.Sprintf("mode=1777,size=%dm", c.TmpMB)
	if err := mountTmpfs(r+"/tmp", tmp); err != nil {
		return err
	}
	if err := buildDev(r, tmp); err != nil {
		return err
	}
	for _, h := range c.Hide {
		if fi, err := os.Stat(r + h); err == nil && fi.IsDir() && filepath.IsAbs(h) {
			if err := unix.Mount("tmpfs", r+h, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=64k"); err != nil {
				return fmt.Errorf("hiding %s: %w", h, err)
			}
		}
	}
	for _, b := range c.Binds {
		if err := bindRO(b, r+b); err != nil {
			return err
		}
	}
	for _, w := range c.Writable {
		if err := bindRW(w, r+w); err != nil {
			return err
		}
	}
	if c.Cache != nil {
		if err := c.Cache.mount(r + jailCacheDir); err != nil {
			return err
		}
	}
	for dir, files := range c.Files {
		if err := mountFiles(r+dir, files, c.UID); err != nil {
			return fmt.Errorf("files at %s: %w", dir, err)
		}
	}
	if err := os.Mkdir(r+"/proc", 0o555); err != nil {
		return err
	}
	// hidepid: the function sees its own processes only.
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if err := unix.Mount("proc", r+"/proc", "proc", flags, "hidepid=invisible"); err != nil {
		if err := unix.Mount("proc", r+"/proc", "proc", flags, "hidepid=2"); err != nil {
			return fmt.Errorf("proc: %w", err)
		}
	}
	return nil
}

// buildDev makes a /dev of the harmless character devices, /dev/shm and the fd links.
func buildDev(r, shm string) error {
	dev := r + "/dev"
	if err := mountTmpfs(dev, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, name := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if err := os.WriteFile(dev+"/"+name, nil, 0o644); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+name, dev+"/"+name, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("/dev/%s: %w", name, err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, dev+"/"+name); err != nil {
			return err
		}
	}
	return mountTmpfs(dev+"/shm", shm)
}

// bindLinked shows the file a system path links to outside the system paths (systemd's
// /etc/resolv.conf → /run/systemd/resolve/stub-resolv.conf), read-only at its own path.
func bindLinked(r, path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil || real == path || inSystemPaths(real) {
		return nil // not a link, or one into the system paths
	}
	if err := os.MkdirAll(filepath.Dir(r+real), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(r+real, nil, 0o644); err != nil {
		return err
	}
	if err := unix.Mount(real, r+real, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", real, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	return unix.Mount("", r+real, "", flags, "")
}

// bindFileRO shows the file src at path in the root r (where path leads, inside r), read-only.
func bindFileRO(src, r, path string) error {
	dst := r + path
	if real, err := filepath.EvalSymlinks(path); err == nil {
		dst = r + real // the link in the root leads to the same place
	}
	if _, err := os.Stat(dst); err != nil {
		return fmt.Errorf("%s in the jail: %w", path, err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s over %s: %w", src, path, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	return unix.Mount("", dst, "", flags, "")
}

// mountFiles shows files in dir on a tmpfs of their own (memory only), the directory and
// each file readable by uid alone, then makes it read-only.
func mountFiles(dir string, files map[string][]byte, uid int) error {
	size := 4096 * (len(files) + 1)
	for _, data := range files {
		size += len(data)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	opts := fmt.Sprintf("mode=0500,uid=%d,gid=%d,size=%d", uid, uid, size)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return err
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o400); err != nil {
			return err
		}
		if err := os.Chown(path, uid, uid); err != nil {
			return err
		}
	}
	return unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts)
}

// remove unmounts the root at r with everything below it and removes the directory.
func removeRoot(r string) {
	_ = unix.Unmount(r, unix.MNT_DETACH)
	_ = os.Remove(r)
}

func mountTmpfs(dir, opts string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("tmpfs %s: %w", dir, err)
	}
	return nil
}

// bindRW shows src at dst, writable, without devices or set-user-ID programs.
func bindRW(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NODEV)
	if err := unix.Mount("", dst, "", flags, ""); err != nil {
		return fmt.Errorf("nosuid %s: %w", src, err)
	}
	return nil
}

// jailCacheDir is where a build finds its tenant's cache.
const jailCacheDir = "/cache"

// jailCache is a tenant's build cache: Dir read-write, with each of Layers (a
// subdirectory's name → a directory the platform filled) shown at that subdirectory as the
// read-only lower layer of an overlay whose writes go to the tenant's .upper-<name>.
type jailCache struct {
	Dir    string
	Layers map[string]string
}

func (c *jailCache) mount(at string) error {
	if err := bindRW(c.Dir, at); err != nil {
		return err
	}
	for name, lower := range c.Layers {
		upper, work := filepath.Join(c.Dir, ".upper-"+name), filepath.Join(c.Dir, ".work-"+name)
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
		if err := unix.Mount("overlay", filepath.Join(at, name), "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("cache layer %s: %w", name, err)
		}
	}
	return nil
}

// bindRO shows src at dst, read-only, without devices or set-user-ID programs.
func bindRO(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	if err := unix.Mount("", dst, "", flags, ""); err != nil {
		return fmt.Errorf("read-only %s: %w", src, err)
	}
	return nil
}

// interpreterPrefix is the directory to show for an interpreter outside the system paths
// (pyenv's /root/.pyenv/versions/3.11.7 for its bin/python3.11), or "".
func interpreterPrefix(real string) string {
	if inSystemPaths(real) {
		return ""
	}
	return filepath.Dir(filepath.Dir(real))
}

func inSystemPaths(path string) bool {
	for _, p := range systemPaths {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}
