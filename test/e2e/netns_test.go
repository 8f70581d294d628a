//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
)

// Environment variables the outer test process hands to the copy of itself it starts inside
// the namespace.
const (
	envInside    = "SLESS_E2E_INSIDE"
	envBridgeDir = "SLESS_E2E_BRIDGE_DIR"
	envTools     = "SLESS_E2E_TOOLS" // tool paths, key=value;...
)

// bridged are the host services reachable inside the namespace at the same loopback address
// and, for pods, at the same port of the node's address.
var bridged = map[string]string{"rabbitmq": "127.0.0.1:5672", "postgres": "127.0.0.1:5432"}

// runOutside prepares what needs the host network (tool builds go through the module
// proxy), bridges RabbitMQ and PostgreSQL to unix sockets, and runs this test binary again
// in a new network and mount namespace. Unix sockets are file-system objects, so both sides
// reach them whatever their network namespace.
func runOutside(tools map[string]string) int {
	dir, err := os.MkdirTemp("", "sless-e2e-bridge-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for name, addr := range bridged {
		ln, err := net.Listen("unix", filepath.Join(dir, name+".sock"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		defer ln.Close()
		go forward(ctx, ln, func() (net.Conn, error) { return net.Dial("tcp", addr) })
	}
	var pairs []string
	for k, v := range tools {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envInside+"=1", envBridgeDir+"="+dir, envTools+"="+strings.Join(pairs, ";"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "e2e: running inside a private namespace (needs root):", err)
		return 1
	}
	return 0
}

// insideTools reads the tool paths runOutside passed in.
func insideTools() map[string]string {
	tools := map[string]string{}
	for _, kv := range strings.Split(os.Getenv(envTools), ";") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			tools[k] = v
		}
	}
	return tools
}

// enterNamespace finishes the namespace set-up from inside: mounts stop propagating to the
// host, loopback comes up, the bridges listen, and a private hosts file covers /etc/hosts.
func enterNamespace(ctx context.Context, hostsFile string) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %w: %s", err, out)
	}
	// Pods have network namespaces of their own, routed through this one.
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enabling forwarding between pods: %w", err)
	}
	if err := os.WriteFile(hostsFile, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		return err
	}
	if err := syscall.Mount(hostsFile, "/etc/hosts", "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s over /etc/hosts: %w", hostsFile, err)
	}
	if err := addAddress(nodeIP); err != nil {
		return err
	}
	dir := os.Getenv(envBridgeDir)
	for name, addr := range bridged {
		_, port, _ := net.SplitHostPort(addr)
		for _, a := range []string{addr, net.JoinHostPort(nodeIP, port)} {
			ln, err := net.Listen("tcp", a)
			if err != nil {
				return fmt.Errorf("bridge for %s: %w", name, err)
			}
			sock := filepath.Join(dir, name+".sock")
			go forward(ctx, ln, func() (net.Conn, error) { return net.Dial("unix", sock) })
		}
	}
	return nil
}

// addAddress puts ip/32 on lo, the way a pod or a Service gets an address of its own; an
// address already there is kept.
func addAddress(ip string) error {
	out, err := exec.Command("ip", "addr", "add", ip+"/32", "dev", "lo").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "File exists") && !strings.Contains(string(out), "already assigned") {
		return fmt.Errorf("ip addr add %s: %w: %s", ip, err, out)
	}
	return nil
}

// forward accepts connections on ln and pipes each to a connection from dial until ctx ends.
func forward(ctx context.Context, ln net.Listener, dial func() (net.Conn, error)) {
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := dial()
			if err != nil {
				slog.Debug("forward: dial failed", "listener", ln.Addr().String(), "err", err)
				return
			}
			defer up.Close()
			pipe(c, up)
		}()
	}
}

// pipe copies both ways and returns when both directions are done.
func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	go half(a, b)
	go half(b, a)
	wg.Wait()
}

// hostsFile is the namespace's /etc/hosts, rewritten in place (the bind mount pins the inode)
// whenever a name is added. Go's resolver rereads it when its mtime or size changes.
type hostsFile struct {
	mu    sync.Mutex
	path  string
	names map[string]string // name → address
}

func (h *hostsFile) set(addr string, names ...string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	changed := false
	for _, n := range names {
		if h.names[n] != addr {
			h.names[n], changed = addr, true
		}
	}
	if !changed {
		return nil
	}
	var b strings.Builder
	b.WriteString("127.0.0.1 localhost\n")
	keys := make([]string, 0, len(h.names))
	for n := range h.names {
		keys = append(keys, n)
	}
	sort.Strings(keys)
	for _, n := range keys {
		fmt.Fprintf(&b, "%s %s\n", h.names[n], n)
	}
	f, err := os.OpenFile(h.path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(b.String()), 0); err != nil {
		return err
	}
	return f.Truncate(int64(b.Len()))
}
