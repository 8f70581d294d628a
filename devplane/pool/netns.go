package pool

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sless.dev/sless/rules"
)

// Network modes of sandboxed functions (NetworkOptions.Mode).
const (
	// NetworkIsolated gives each function (all its revisions) a network namespace of its
	// own — a loopback no other function shares — with outbound connections through
	// slirp4netns, a user-mode TCP/IP stack, to public addresses only: the machine's own
	// addresses, its loopback and the private, link-local and CGNAT ranges are routed
	// nowhere unless NetworkOptions.Allow names them.
	NetworkIsolated = "isolated"
	// NetworkNone gives each function a namespace with its loopback only.
	NetworkNone = "none"
	// NetworkHost leaves functions on the machine's network: they reach what it reaches,
	// its loopback services and sless dev's gateway included. For a trusted single-user
	// machine only.
	NetworkHost = "host"
)

// NetworkOptions tune what a sandboxed function reaches on the network.
type NetworkOptions struct {
	// Mode is NetworkIsolated (the default), NetworkNone or NetworkHost.
	Mode string
	// Allow are non-public IPv4 ranges functions may reach in NetworkIsolated mode (a
	// database on the local network): routed through slirp4netns like public addresses.
	// The machine's own loopback is never reachable.
	Allow []netip.Prefix
}

// slirp4netns' fixed addresses in the namespace: its gateway (the machine itself, refused by
// --disable-host-loopback) and its DNS forwarder.
var (
	slirpGateway = netip.MustParseAddr("10.0.2.2")
	slirpDNS     = "nameserver 10.0.2.3\n"
)

// networker makes the sandboxes' network namespaces (nil in NetworkHost mode).
type networker struct {
	opts  NetworkOptions
	slirp string // the slirp4netns program; "" in NetworkNone mode
	// resolv is the resolv.conf a jail gets in NetworkIsolated mode (slirp4netns' forwarder).
	resolv string
	// host is the pool's own namespace, to return to after making one on the jail thread.
	host *os.File
}

// newNetworker checks what opts ask for can be had here; a missing slirp4netns leaves
// functions without outbound network (why says so).
func newNetworker(opts NetworkOptions, dir string, t *jailThread) (n *networker, why string, err error) {
	switch opts.Mode {
	case "":
		opts.Mode = NetworkIsolated
	case NetworkIsolated, NetworkNone:
	case NetworkHost:
		return nil, "", nil
	default:
		return nil, "", fmt.Errorf("network mode %q: want %s, %s or %s", opts.Mode, NetworkIsolated, NetworkNone, NetworkHost)
	}
	n = &networker{opts: opts}
	if opts.Mode == NetworkIsolated {
		if n.slirp, err = exec.LookPath("slirp4netns"); err != nil {
			n.opts.Mode, why = NetworkNone, "slirp4netns is not installed (Debian: apt-get install slirp4netns)"
		} else {
			n.resolv = dir + "/resolv.conf"
			if err := os.WriteFile(n.resolv, []byte(slirpDNS), 0o644); err != nil {
				return nil, "", err
			}
		}
	}
	err = t.run(func() error {
		if n.host, err = os.Open("/proc/thread-self/ns/net"); err != nil {
			return err
		}
		// The jail thread must be able to return here after making a namespace (setns needs
		// CAP_SYS_ADMIN over its owner: not so in a user namespace of our own).
		if err := unix.Setns(int(n.host.Fd()), unix.CLONE_NEWNET); err != nil {
			n.host.Close()
			return fmt.Errorf("network namespaces: %w", err)
		}
		return nil
	})
	return n, why, err
}

// Describe says what functions reach, for the banner.
func (n *networker) Describe() string {
	if n == nil {
		return "the machine's network (no isolation)"
	}
	if n.opts.Mode == NetworkNone {
		return "a network namespace of their own with no outbound network"
	}
	s := "a network namespace of their own, outbound to public addresses only (slirp4netns)"
	if len(n.opts.Allow) > 0 {
		s += fmt.Sprintf(" and %v", n.opts.Allow)
	}
	return s
}

// netNamespace is one sandbox's network namespace and the slirp4netns that connects it.
type netNamespace struct {
	ns    *os.File
	slirp *exec.Cmd
}

// make creates a namespace on the jail thread t (whose namespace a process started from it
// enters, see enter), brings its loopback up, connects it (NetworkIsolated) and routes the
// ranges that are not public nowhere.
func (n *networker) make(t *jailThread) (*netNamespace, error) {
	out := &netNamespace{}
	err := t.run(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("a network namespace: %w", err)
		}
		ns, err := os.Open("/proc/thread-self/ns/net")
		if err == nil {
			out.ns = ns
		}
		backHome(n.host)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := n.connect(out); err != nil {
		out.close()
		return nil, err
	}
	return out, nil
}

func (n *networker) connect(nn *netNamespace) error {
	h, err := netlink.NewHandleAt(netns.NsHandle(nn.ns.Fd()))
	if err != nil {
		return fmt.Errorf("netlink in a function's namespace: %w", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil || n.opts.Mode == NetworkNone {
		return err
	}
	if err := n.startSlirp(nn); err != nil {
		return err
	}
	tap, err := h.LinkByName("tap0")
	if err != nil {
		return fmt.Errorf("slirp4netns' interface: %w", err)
	}
	for _, p := range n.blocked() {
		r := &netlink.Route{Dst: prefixNet(p), Type: unix.RTN_UNREACHABLE}
		if err := h.RouteAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("route %s nowhere: %w", p, err)
		}
	}
	for _, p := range n.opts.Allow {
		r := &netlink.Route{Dst: prefixNet(p), Gw: net.IP(slirpGateway.AsSlice()), LinkIndex: tap.Attrs().Index}
		if err := h.RouteAdd(r); err != nil {
			return fmt.Errorf("route %s to slirp4netns: %w", p, err)
		}
	}
	return nil
}

// blocked are the ranges routed nowhere: those that are not public (slirp4netns' own
// network keeps its more specific route) and the machine's own addresses, which slirp4netns
// would otherwise connect to as any other — less what Allow covers (a more specific allowed
// range is routed to slirp4netns instead).
func (n *networker) blocked() []netip.Prefix {
	out := slices.DeleteFunc(rules.NonPublicPrefixes(), func(p netip.Prefix) bool { return !p.Addr().Is4() })
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap().Is4() && rules.PublicAddress(ip) {
				out = append(out, netip.PrefixFrom(ip.Unmap(), 32))
			}
		}
	}
	return slices.DeleteFunc(out, func(p netip.Prefix) bool {
		return slices.ContainsFunc(n.opts.Allow, func(a netip.Prefix) bool { return a.Bits() <= p.Bits() && a.Contains(p.Addr()) })
	})
}

func prefixNet(p netip.Prefix) *net.IPNet {
	p = p.Masked()
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// startSlirp connects nn to the machine's network through slirp4netns, sandboxed itself,
// and waits until it has configured the namespace's interface.
func (n *networker) startSlirp(nn *netNamespace) error {
	ready, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer ready.Close()
	cmd := exec.Command(n.slirp, "--configure", "--mtu=65520", "--disable-host-loopback",
		"--enable-sandbox", "--enable-seccomp", "--netns-type=path", "--ready-fd=4", "/proc/self/fd/3", "tap0")
	cmd.ExtraFiles = []*os.File{nn.ns, readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out := &limitedBuffer{buf: &bytes.Buffer{}, max: 4096}
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return fmt.Errorf("starting slirp4netns: %w", err)
	}
	nn.slirp = cmd
	_ = ready.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := ready.Read(make([]byte, 1)); err != nil {
		nn.close()
		nn.slirp = nil
		return fmt.Errorf("slirp4netns did not get ready: %v %s", err, out.buf.String())
	}
	return nil
}

// close stops slirp4netns and lets the namespace go with its last process.
func (nn *netNamespace) close() {
	if nn.slirp != nil {
		_ = nn.slirp.Process.Kill()
		_ = nn.slirp.Wait()
	}
	if nn.ns != nil {
		nn.ns.Close()
	}
}

// enter runs start on the jail thread inside nn: what it forks is born in the namespace.
func (nn *netNamespace) enter(host *os.File, start func() error) error {
	if err := unix.Setns(int(nn.ns.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("entering the function's network namespace: %w", err)
	}
	defer backHome(host)
	return start()
}

// backHome returns the jail thread to the pool's own network namespace. It cannot fail on
// a namespace the thread came from; if it did, every later start would be in the wrong one,
// so it stops the pool instead.
func backHome(host *os.File) {
	if err := unix.Setns(int(host.Fd()), unix.CLONE_NEWNET); err != nil {
		panic(fmt.Sprintf("the sandbox thread cannot return to the pool's network namespace: %v", err))
	}
}
