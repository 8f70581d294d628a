package devplane_test

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/devplane/pool"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/test/testkit"
)

// attacker is a Python function that tries what the event asks and answers with what came
// of it: read a file, list a directory, or call a Unix socket with a forged subject.
const attacker = `import os, socket

def handle(event):
    try:
        if "read" in event:
            with open(event["read"]) as f:
                return {"ok": f.read()}
        if "list" in event:
            return {"ok": sorted(os.listdir(event["list"]))}
        if "connect" in event:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(event["connect"])
            s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nX-Sless-Subject: victim\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            return {"ok": data.decode(errors="replace")}
    except Exception as e:
        return {"error": type(e).__name__ + ": " + str(e)}
    return {"error": "nothing asked"}
`

// attempt invokes the attacker with event and decodes its answer.
func (d *dev) attempt(event string) (ok any, errText string) {
	d.t.Helper()
	code, body := d.invoke("attacker", event)
	if code != 200 {
		d.t.Fatalf("attacker %s: %d %s", event, code, body)
	}
	var out struct {
		OK    any    `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		d.t.Fatalf("attacker %s: %s", event, body)
	}
	return out.OK, out.Error
}

func event(kv ...string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// TestSandboxKeepsTenantsApart is attack 7 of issue 24: a function of one tenant reads
// neither the data directory's signing key nor another tenant's builds nor other processes'
// command lines, and cannot reach another function's Unix socket around the gateway; the
// gateway still reaches both.
func TestSandboxKeepsTenantsApart(t *testing.T) {
	builds := t.TempDir()
	d := startDev(t, devOptions{buildDir: builds})
	key := filepath.Join(d.dataDir, "dev-signing.key") // where sless dev keeps it
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.deploy("attacker", "python3.11", map[string]string{"handler.py": attacker}, api.FunctionFields{})
	victim := d.as("victim")
	victim.deploy("spy", "python3.11", map[string]string{"handler.py": spy}, api.FunctionFields{MinReplicas: ptr.To[int32](1)})
	testkit.WaitFor(t, "the victim's warm process", 10*time.Second, func() bool { return victim.stats("spy").Ready == 1 })

	if got, errText := d.attempt(event("read", key)); got != nil {
		t.Errorf("the function read the signing key: %v", got)
	} else {
		t.Logf("reading the key: %s", errText)
	}
	for _, dir := range []string{filepath.Join(d.dataDir), filepath.Join(d.dataDir, "state"), filepath.Join(builds, victim.ns)} {
		if got, errText := d.attempt(event("list", dir)); got != nil {
			t.Errorf("the function listed %s: %v", dir, got)
		} else {
			t.Logf("listing %s: %s", dir, errText)
		}
	}
	// The builds directory shows the tenant's own builds at most.
	if got, _ := d.attempt(event("list", builds)); got != nil {
		for _, name := range got.([]any) {
			if name != d.ns {
				t.Errorf("the builds directory shows %v to tenant %s", name, d.ns)
			}
		}
	}
	// Nor sless dev's process, nor the victim's.
	for _, pid := range []int{os.Getpid(), victim.stats("spy").PIDs[0]} {
		if got, _ := d.attempt(event("read", "/proc/"+strconv.Itoa(pid)+"/cmdline")); got != nil {
			t.Errorf("the function read the command line of process %d: %q", pid, got)
		}
	}
	// Its own socket has no path it could rename or replace (issue 51: a symlink renamed over
	// it sent the gateway's next call to a root-only socket): the directory the pool dials in
	// does not exist for it, nor the one it was once shown at.
	sock := d.backend.Pool().Socket(victim.stats("spy").Addrs[0])
	for _, dir := range []string{"/run/sless", filepath.Dir(sock)} {
		if got, errText := d.attempt(event("list", dir)); got != nil {
			t.Errorf("the function listed the socket directory %s: %v", dir, got)
		} else {
			t.Logf("listing %s: %s", dir, errText)
		}
	}
	if got, errText := d.attempt(event("connect", sock)); got != nil {
		t.Errorf("the function reached another tenant's socket %s: %v", sock, got)
	} else {
		t.Logf("connecting to %s: %s", sock, errText)
	}
	if code, body := victim.invoke("spy", `{}`); code != 200 {
		t.Errorf("the victim through the gateway: %d %s", code, body)
	}
}

// hog holds the megabytes it is asked for for a moment.
const hog = `import time
def handle(event):
    data = b"x" * (event["mb"] << 20)
    time.sleep(0.5)
    return len(data)
`

// TestSandboxAppliesMemoryMB: a function that allocates beyond its memory_mb is killed and
// its log says why; within it, it answers as usual, and after it, it starts again.
func TestSandboxAppliesMemoryMB(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	d.deploy("hog", "python3.11", map[string]string{"handler.py": hog}, api.FunctionFields{MemoryMB: ptr.To[int32](64)})
	if code, body := d.invoke("hog", `{"mb": 8}`); code != 200 {
		t.Fatalf("8 MB within a memory_mb of 64: %d %s", code, body)
	}
	if code, body := d.invoke("hog", `{"mb": 512}`); code == 200 {
		t.Fatalf("512 MB with a memory_mb of 64: %d %s", code, body)
	}
	testkit.WaitFor(t, "the reason in the function's log", 5*time.Second, func() bool {
		_, lines := d.logs("/functions/hog/logs", d.token)
		return len(withText(lines, "memory_mb of 64")) == 1
	})
	if code, body := d.invoke("hog", `{"mb": 8}`); code != 200 {
		t.Fatalf("after the kill: %d %s", code, body)
	}
}

// bomb forks as many children as it may, up to max, each sleeping a moment; it reaps them
// and answers how many it got.
const bomb = `import os, time
def handle(event):
    n, err = 0, ""
    try:
        for _ in range(event.get("max", 400)):
            if os.fork() == 0:
                time.sleep(2)
                os._exit(0)
            n += 1
    except OSError as e:
        err = str(e)
    for _ in range(n):
        os.wait()
    return {"forked": n, "error": err}
`

// TestSandboxBoundsProcesses: a fork bomb (bounded: 1,500 children of 2 s) gets no more
// processes than its function's limit; another tenant's function answers meanwhile, and the bomb's function afterwards.
func TestSandboxBoundsProcesses(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	// Memory enough for every child: the process limit is under test.
	d.deploy("bomb", "python3.11", map[string]string{"handler.py": bomb}, api.FunctionFields{MemoryMB: ptr.To[int32](16384)})
	other := d.as("other")
	other.deploy("talker", "python3.11", map[string]string{"handler.py": talker}, api.FunctionFields{})
	done := make(chan string, 1)
	go func() { _, body := d.invoke("bomb", `{"max": 1500}`); done <- body }()
	time.Sleep(300 * time.Millisecond)
	if code, body := other.invoke("talker", `{"say":"still here"}`); code != 200 {
		t.Fatalf("another tenant's function during the bomb: %d %s", code, body)
	}
	var got struct {
		Forked int
		Error  string
	}
	select {
	case body := <-done:
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("the bomb answered %s", body)
		}
	case <-time.After(3 * time.Minute):
		// Only a hang ends here: the limit itself is asserted on the count below. A
		// thousand Python forks take 25 s and more of kernel time on two busy cores.
		t.Fatal("the bomb did not stop")
	}
	if got.Forked >= 1024 || !strings.Contains(got.Error, "Resource temporarily unavailable") {
		t.Fatalf("the bomb forked %d processes (limit 1,024 with its threads), error %q", got.Forked, got.Error)
	}
	t.Logf("the bomb forked %d: %s", got.Forked, got.Error)
	if code, body := d.invoke("bomb", `{"max": 3}`); code != 200 || !strings.Contains(body, `"forked":3`) {
		t.Fatalf("the bomb's function afterwards: %d %s", code, body)
	}
}

// dialer is a Python function that connects to the TCP address an event names ({"tcp":
// "host:port"}) and answers what it read, or listens on one ({"listen": port}) for a while.
const dialer = `import socket, threading

def handle(event):
    if "listen" in event:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", event["listen"]))
        s.listen(8)
        def serve():
            while True:
                c, _ = s.accept()
                c.sendall(b"VICTIM-LOOPBACK")
                c.close()
        threading.Thread(target=serve, daemon=True).start()
        return {"ok": "listening"}
    host, port = event["tcp"].rsplit(":", 1)
    try:
        c = socket.create_connection((host, int(port)), timeout=3)
        c.settimeout(3)
        return {"ok": c.recv(100).decode(errors="replace")}
    except Exception as e:
        return {"error": type(e).__name__ + ": " + str(e)}
`

// hostAddress is a non-loopback IPv4 address of this machine.
func hostAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			return ipn.IP.String()
		}
	}
	t.Skip("this machine has no non-loopback IPv4 address")
	return ""
}

// banner serves a TCP listener on addr that writes text to each connection.
func banner(t *testing.T, addr, text string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	testkit.AcceptEach(t, ln, func(c net.Conn) { c.Write([]byte(text)) })
	return ln.Addr().String()
}

// TestSandboxNetwork is issue 51's third attack: a sandboxed function reaches none of this
// machine's services — on its loopback (PostgreSQL, RabbitMQ, sless dev's own gateway) or on
// its other addresses — and no other function's listener, while an address the operator
// allows is reached through the namespace's outbound path.
func TestSandboxNetwork(t *testing.T) {
	t.Parallel()
	host := hostAddress(t)
	onHost := banner(t, net.JoinHostPort(host, "0"), "HOST-SERVICE")
	allowed := netip.MustParsePrefix(host + "/32")
	d := startDev(t, devOptions{network: pool.NetworkOptions{Allow: []netip.Prefix{allowed}}})
	if iso := d.backend.Pool().Isolation(); !iso.Sandboxed {
		t.Skip("sandboxes need root")
	} else if !strings.Contains(iso.Network, "outbound to public addresses only (slirp4netns) and") || strings.Contains(iso.Network, "(route") {
		t.Fatalf("functions are on %s", iso.Network)
	}
	d.deploy("dialer", "python3.11", map[string]string{"handler.py": dialer}, api.FunctionFields{})
	victim := d.as("victim")
	victim.deploy("listener", "python3.11", map[string]string{"handler.py": dialer}, api.FunctionFields{MinReplicas: ptr.To[int32](1)})
	if code, body := victim.invoke("listener", `{"listen": 7070}`); code != 200 {
		t.Fatalf("the victim's listener: %d %s", code, body)
	}
	gateway := strings.TrimPrefix(d.endpoint, "http://")
	for _, target := range []string{banner(t, "127.0.0.1:0", "LOOPBACK-SERVICE"), gateway, "127.0.0.1:7070"} {
		code, body := d.invoke("dialer", event("tcp", target))
		if code != 200 || !strings.Contains(body, `"error"`) {
			t.Errorf("the function reached %s: %d %s", target, code, body)
		}
	}
	// The machine's own address is one of its services too, unless the operator allows it.
	code, body := d.invoke("dialer", event("tcp", onHost))
	if code != 200 || !strings.Contains(body, "HOST-SERVICE") {
		t.Errorf("an allowed address %s: %d %s", onHost, code, body)
	}
	closed := startDev(t, devOptions{})
	closed.deploy("dialer", "python3.11", map[string]string{"handler.py": dialer}, api.FunctionFields{})
	if code, body := closed.invoke("dialer", event("tcp", onHost)); code != 200 || !strings.Contains(body, `"error"`) {
		t.Errorf("the machine's address %s without an allow-list: %d %s", onHost, code, body)
	}
}
