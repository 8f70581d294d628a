//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// runtime is the container runtime of the e2e kubelet: it pulls images from the test
// registry into a cache per digest and runs each container from its image the way runc
// does — an overlay over the unpacked image, private mount, pid, network, UTS and IPC
// namespaces, pivot_root, the image's or pod's user and groups, its working directory — so
// what a real node would refuse (an unreadable workdir, a root-only file) fails here too.
type runtime struct {
	dir   string // images/<digest>/ (unpacked), containers/<id>/ (overlay upper and work)
	mu    sync.Mutex
	refs  map[string]*pulledImage // image reference → what it resolved to (IfNotPresent)
	pulls map[v1.Hash]*unpack     // digest → its one unpack
	next  int
}

// pulledImage is an image present on the node.
type pulledImage struct {
	ref    string // repository@digest, the container status' imageID
	rootfs string
	config v1.Config
}

type unpack struct {
	once sync.Once
	err  error
}

func newRuntime(dir string) *runtime {
	return &runtime{dir: dir, refs: map[string]*pulledImage{}, pulls: map[v1.Hash]*unpack{}}
}

// pull makes ref present: resolved once per reference (pull policy IfNotPresent, as for
// every non-latest tag), unpacked once per digest. It reports whether it had to fetch.
func (r *runtime) pull(ctx context.Context, ref string) (*pulledImage, bool, error) {
	r.mu.Lock()
	img, ok := r.refs[ref]
	r.mu.Unlock()
	if ok {
		return img, false, nil
	}
	nref, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return nil, true, fmt.Errorf("invalid image reference %q: %w", ref, err)
	}
	remoteImg, err := remote.Image(nref, remote.WithContext(ctx), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}))
	if err != nil {
		return nil, true, fmt.Errorf("pulling %s: %w", ref, err)
	}
	digest, err := remoteImg.Digest()
	if err != nil {
		return nil, true, err
	}
	cf, err := remoteImg.ConfigFile()
	if err != nil {
		return nil, true, fmt.Errorf("config of %s: %w", ref, err)
	}
	r.mu.Lock()
	u := r.pulls[digest]
	if u == nil {
		u = &unpack{}
		r.pulls[digest] = u
	}
	r.mu.Unlock()
	rootfs := filepath.Join(r.dir, "images", digest.Hex)
	u.once.Do(func() { u.err = unpackImage(remoteImg, rootfs) })
	if u.err != nil {
		return nil, true, fmt.Errorf("unpacking %s: %w", ref, u.err)
	}
	img = &pulledImage{ref: nref.Context().Name() + "@" + digest.String(), rootfs: rootfs, config: cf.Config}
	r.mu.Lock()
	r.refs[ref] = img
	r.mu.Unlock()
	return img, true, nil
}

// unpackImage writes the image's flattened filesystem (whiteouts applied) to dir with its
// owners and modes, through tar as a container runtime's snapshotter would.
func unpackImage(img v1.Image, dir string) error {
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	cmd := exec.Command("tar", "-x", "--numeric-owner", "-p", "-f", "-", "-C", tmp)
	var stderr strings.Builder
	cmd.Stdin, cmd.Stderr = rc, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("tar: %w: %s", err, stderr.String())
	}
	return os.Rename(tmp, dir)
}

// containerSpec is what the container's init (this test binary, re-executed) needs; it
// travels as JSON in envContainer.
type containerSpec struct {
	Lower, Upper, Work, Merged string
	Argv, Env                  []string
	UID, GID                   int
	Groups                     []int
	Dir, Hostname              string
	ReadOnlyRoot               bool
	Mounts                     []bindMount
}

// bindMount puts Source (a host path) at Target inside the container.
type bindMount struct {
	Source, Target string
	ReadOnly       bool
}

const envContainer = "SLESS_E2E_CONTAINER"

// imageProcess is a running container: its init became the container's process 1.
type imageProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	code int
}

// start runs spec in fresh namespaces, with ip as the address of its own network namespace
// (a veth pair to this node), and returns once the process runs.
func (r *runtime) start(spec containerSpec, ip string, stdout, stderr io.Writer) (*imageProcess, error) {
	r.mu.Lock()
	r.next++
	id := r.next
	r.mu.Unlock()
	base := filepath.Join(r.dir, "containers", strconv.Itoa(id))
	spec.Upper, spec.Work, spec.Merged = filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "merged")
	for _, d := range []string{spec.Upper, spec.Work, spec.Merged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer goR.Close()
	defer goW.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = []string{envContainer + "=" + string(b)}
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = stdout, stderr, []*os.File{goR}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL,
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the container init: %w", err)
	}
	p := track(cmd)
	if err := podNetwork(cmd.Process.Pid, fmt.Sprintf("sl%d", id), ip); err != nil {
		p.stop(0)
		return nil, err
	}
	if _, err := goW.Write([]byte{1}); err != nil {
		p.stop(0)
		return nil, err
	}
	return p, nil
}

// podNetwork gives the namespace of pid the address ip on eth0, one end of a veth pair whose
// other end stays on this node with a route to ip; the node (nodeIP) is the pod's gateway.
func podNetwork(pid int, veth, ip string) error {
	ns := "--net=/proc/" + strconv.Itoa(pid) + "/ns/net"
	steps := [][]string{
		{"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(pid)},
		{"ip", "link", "set", veth, "up"},
		// replace: the pod's previous container (an init container, a restart) may still be
		// leaving with its own veth and the route to the same address.
		{"ip", "route", "replace", ip + "/32", "dev", veth},
		{"nsenter", ns, "ip", "link", "set", "lo", "up"},
		{"nsenter", ns, "ip", "addr", "add", ip + "/32", "dev", "eth0"},
		{"nsenter", ns, "ip", "link", "set", "eth0", "up"},
		{"nsenter", ns, "ip", "route", "add", nodeIP, "dev", "eth0"},
		{"nsenter", ns, "ip", "route", "add", "default", "via", nodeIP, "dev", "eth0"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("pod network (%s): %w: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// containerInit runs in the container's fresh namespaces as its process 1, still seeing the
// node's filesystem: it waits for the network, assembles the root (overlay over the image,
// /proc, /dev, the kubelet's bind mounts), pivots into it, drops to the container's user and
// execs the container's command. It never returns.
func containerInit() {
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "container init: "+format+"\n", args...)
		os.Exit(128)
	}
	var spec containerSpec
	if err := json.Unmarshal([]byte(os.Getenv(envContainer)), &spec); err != nil {
		fail("spec: %v", err)
	}
	goR := os.NewFile(3, "go")
	if _, err := goR.Read(make([]byte, 1)); err != nil {
		fail("waiting for the pod network: %v", err)
	}
	goR.Close()
	if err := assembleRoot(spec); err != nil {
		fail("%v", err)
	}
	if err := syscall.Sethostname([]byte(spec.Hostname)); err != nil {
		fail("hostname: %v", err)
	}
	groups := append([]int{spec.GID}, spec.Groups...)
	if err := syscall.Setgroups(groups); err != nil {
		fail("setgroups %v: %v", groups, err)
	}
	if err := syscall.Setgid(spec.GID); err != nil {
		fail("setgid %d: %v", spec.GID, err)
	}
	if err := syscall.Setuid(spec.UID); err != nil {
		fail("setuid %d: %v", spec.UID, err)
	}
	// As runc: the working directory must be reachable as the container's user.
	if err := os.Chdir(spec.Dir); err != nil {
		fail("chdir %s: %v", spec.Dir, err)
	}
	os.Clearenv()
	for _, kv := range spec.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			_ = os.Setenv(k, v)
		}
	}
	path, err := exec.LookPath(spec.Argv[0])
	if err != nil {
		fail("exec %s: %v", spec.Argv[0], err)
	}
	err = syscall.Exec(path, spec.Argv, spec.Env)
	fail("exec %s: %v", path, err)
}

// assembleRoot builds the container's root and pivots into it; the node's root stays
// reachable only until the bind mounts are in place, then is detached.
func assembleRoot(s containerSpec) error {
	mounts := []struct {
		src, target, fstype string
		flags               uintptr
		data                string
	}{
		{"", "/", "", syscall.MS_REC | syscall.MS_PRIVATE, ""},
		{"overlay", s.Merged, "overlay", 0, "lowerdir=" + s.Lower + ",upperdir=" + s.Upper + ",workdir=" + s.Work},
	}
	for _, m := range mounts {
		if err := syscall.Mount(m.src, m.target, m.fstype, m.flags, m.data); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err)
		}
	}
	old := filepath.Join(s.Merged, ".oldroot")
	if err := os.MkdirAll(old, 0o700); err != nil {
		return err
	}
	if err := syscall.PivotRoot(s.Merged, old); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := mountSpecial(); err != nil {
		return err
	}
	for _, b := range s.Mounts {
		if err := bind("/.oldroot"+b.Source, b.Target, b.ReadOnly); err != nil {
			return err
		}
	}
	if err := syscall.Unmount("/.oldroot", syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the node's root: %w", err)
	}
	_ = os.Remove("/.oldroot")
	if s.ReadOnlyRoot {
		if err := syscall.Mount("", "/", "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("read-only root: %w", err)
		}
	}
	return nil
}

// mountSpecial mounts /proc of the container's pid namespace and a minimal /dev of the
// node's character devices, as a container runtime does.
func mountSpecial() error {
	for _, d := range []string{"/proc", "/dev"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := syscall.Mount("tmpfs", "/dev", "tmpfs", syscall.MS_NOSUID, "mode=755"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, dev := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if err := bind("/.oldroot/dev/"+dev, "/dev/"+dev, false); err != nil {
			return err
		}
	}
	for link, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, "/dev/"+link); err != nil {
			return err
		}
	}
	if err := os.MkdirAll("/dev/shm", 0o1777); err != nil {
		return err
	}
	return syscall.Mount("shm", "/dev/shm", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777")
}

// bind mounts src (a file or directory) at target, creating the mount point inside the
// container's root (paths resolve there: the root is already pivoted).
func bind(src, target string, readOnly bool) error {
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("bind source: %w", err)
	}
	if st.IsDir() {
		err = os.MkdirAll(target, 0o755)
	} else if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			f.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("mount point %s: %w", target, err)
	}
	if err := syscall.Mount(src, target, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, target, err)
	}
	if readOnly {
		if err := syscall.Mount("", target, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("read-only %s: %w", target, err)
		}
	}
	return nil
}

// argv is what the kubelet runs: command replaces the image's entrypoint (and drops its
// cmd), args replace its cmd; $(VAR) references expand from the container's environment.
func argv(command, args []string, img v1.Config, env map[string]string) ([]string, error) {
	var out []string
	switch {
	case len(command) > 0:
		out = append(append(out, command...), args...)
	case len(args) > 0:
		out = append(append(out, img.Entrypoint...), args...)
	default:
		out = append(append(out, img.Entrypoint...), img.Cmd...)
	}
	if len(out) == 0 {
		return nil, errors.New("no command: neither the container nor the image names one")
	}
	for i, a := range out {
		out[i] = expand(a, env)
	}
	return out, nil
}

// expand replaces $(NAME) with env[NAME] where defined and $$ with $, as the kubelet does.
func expand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], "$$"):
			b.WriteByte('$')
			i++
		case strings.HasPrefix(s[i:], "$("):
			if end := strings.IndexByte(s[i:], ')'); end > 0 {
				if v, ok := env[s[i+2:i+end]]; ok {
					b.WriteString(v)
					i += end
					continue
				}
			}
			b.WriteByte(s[i])
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// imageUser parses the image's USER (uid[:gid], numeric as every image here writes it).
func imageUser(user string) (uid, gid int, err error) {
	if user == "" {
		return 0, 0, nil
	}
	u, g, hasGroup := strings.Cut(user, ":")
	if uid, err = strconv.Atoi(u); err != nil {
		return 0, 0, fmt.Errorf("image user %q is not numeric (the e2e runtime resolves no names)", user)
	}
	gid = uid
	if hasGroup {
		if gid, err = strconv.Atoi(g); err != nil {
			return 0, 0, fmt.Errorf("image group %q is not numeric", user)
		}
	}
	return uid, gid, nil
}

// track waits for cmd in the background and keeps its exit code.
func track(cmd *exec.Cmd) *imageProcess {
	p := &imageProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		if err != nil && p.code == 0 {
			p.code = 1
		}
		if p.code < 0 { // killed by a signal: report 128+signal like a container runtime
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
				p.code = 128 + int(ws.Signal())
			}
		}
		close(p.done)
	}()
	return p
}

func (p *imageProcess) wait() int { <-p.done; return p.code }

// stop sends SIGTERM to the container's process 1 (which handles it or not, as in any
// container) and kills the whole pid namespace after grace.
func (p *imageProcess) stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// canary watches the machine's root while kaniko builds run (kaniko writes into / and deletes
// whole filesystems between stages): a file planted there must stay as it is and no entry
// of / may appear or go.
type canary struct {
	path    string
	content []byte
	entries []string
}

func plantCanary() (*canary, error) {
	c := &canary{path: fmt.Sprintf("/sless-e2e-canary-%d", os.Getpid()), content: []byte(time.Now().String())}
	if err := os.WriteFile(c.path, c.content, 0o644); err != nil {
		return nil, fmt.Errorf("planting the canary: %w", err)
	}
	var err error
	c.entries, err = rootEntries()
	return c, err
}

// check reports any change to the machine's root and removes the canary.
func (c *canary) check() error {
	defer os.Remove(c.path)
	b, err := os.ReadFile(c.path)
	if err != nil || string(b) != string(c.content) {
		return fmt.Errorf("the canary %s in the machine's root changed (%q, %v): a container wrote outside its root", c.path, b, err)
	}
	now, err := rootEntries()
	if err != nil {
		return err
	}
	if strings.Join(now, " ") != strings.Join(c.entries, " ") {
		return fmt.Errorf("the machine's root changed during the suite: before %v, after %v", c.entries, now)
	}
	return nil
}

func rootEntries() ([]string, error) {
	des, err := os.ReadDir("/")
	if err != nil {
		return nil, err
	}
	names := make([]string, len(des))
	for i, d := range des {
		names[i] = d.Name()
	}
	return names, nil
}
