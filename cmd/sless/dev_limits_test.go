package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/devplane/pool"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/test/testkit"
)

// devDataDir is a data directory removed after the test, builds included (sless dev makes
// them read-only).
func devDataDir(t *testing.T) string {
	dir := t.TempDir()
	t.Cleanup(func() { _ = buildkit.Unseal(dir) }) // runs before TempDir's removal
	return dir
}

// devSession is a running `sless dev` with its endpoint, a client and the tenant namespace.
type devSession struct {
	endpoint, token, ns string
	c                   *client.Client
}

func startDevSession(t *testing.T, args ...string) devSession {
	t.Helper()
	out, _ := runDevCmd(t, append([]string{"--data-dir", devDataDir(t), "--listen", "127.0.0.1:0"}, args...)...)
	return sessionOf(t, waitOutput(t, out, "export SLESS_TOKEN=", time.Minute))
}

// sessionOf signs in with the endpoint and token a banner of sless dev exports.
func sessionOf(t *testing.T, banner string) devSession {
	t.Helper()
	vars := map[string]string{}
	for _, m := range exportRE.FindAllStringSubmatch(banner, -1) {
		vars[m[1]] = m[2]
	}
	if vars["SLESS_ENDPOINT"] == "" || vars["SLESS_TOKEN"] == "" {
		t.Fatalf("banner without endpoint and token:\n%s", banner)
	}
	c, err := client.New(vars["SLESS_ENDPOINT"], vars["SLESS_TOKEN"], nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.WhoAmI(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return devSession{endpoint: vars["SLESS_ENDPOINT"], token: vars["SLESS_TOKEN"], ns: id.Namespace, c: c}
}

// deployPython creates a Python function from handler.py source and waits until it is Ready.
func (d devSession) deployPython(t *testing.T, name, handler string, timeoutSec int32) {
	t.Helper()
	d.uploadPython(t, name, handler, api.FunctionFields{TimeoutSec: &timeoutSec}, "Ready", func(s api.FunctionStatus) bool { return s.Ready })
}

// uploadPython creates a Python function with fields, uploads handler.py and waits until
// its status is what (done says when).
func (d devSession) uploadPython(t *testing.T, name, handler string, fields api.FunctionFields, what string, done func(api.FunctionStatus) bool) {
	t.Helper()
	d.upload(t, name, "python3.11", map[string]string{"handler.py": handler}, fields, what, done)
}

// upload creates a function of runtime with fields, uploads files and waits until its status
// is what (done says when).
func (d devSession) upload(t *testing.T, name, runtime string, files map[string]string, fields api.FunctionFields, what string, done func(api.FunctionStatus) bool) {
	t.Helper()
	ctx := context.Background()
	fields.Runtime = &runtime
	if _, err := d.c.CreateFunction(ctx, d.ns, api.CreateFunction{Name: name, FunctionFields: fields}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.UploadSource(ctx, d.ns, name, bytes.NewReader(testkit.Zip(t, files))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		fn, err := d.c.GetFunction(ctx, d.ns, name)
		if err == nil && done(fn.Status) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("function %s not %s: %+v %v", name, what, fn.Status, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDevBoundsConnections is attack 4 of issue 14 against `sless dev`: a body sent at a
// byte a second is cut (on an unauthenticated /v1 call, on /fn/ — by the body idle bound,
// long before the function's timeout —, on /fn/ calls answered before the body is read and
// on an asynchronous call), 2,000 idle keep-alive connections are closed, the server
// answering others meanwhile, and connections beyond the cap get a clear 503.
func TestDevBoundsConnections(t *testing.T) {
	d := startDevSession(t, "--body-timeout", "2s", "--body-idle-timeout", "500ms", "--idle-timeout", "2s",
		"--max-connections", "2100", "--max-connections-per-client", "2100", "--max-requests-per-client", "2100")
	timeout := int32(30)
	d.uploadPython(t, "echo", "def handle(event):\n    return event\n",
		api.FunctionFields{TimeoutSec: &timeout, Async: &api.AsyncFields{Enabled: ptr.To(true), MaxAttempts: ptr.To(int32(1))}},
		"Ready", func(s api.FunctionStatus) bool { return s.Ready })
	// guarded requires auth (and is not deployed: the token is checked first).
	ctx := context.Background()
	if _, err := d.c.CreateFunction(ctx, d.ns, api.CreateFunction{Name: "guarded", FunctionFields: api.FunctionFields{Runtime: ptr.To("python3.11")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.CreateTrigger(ctx, d.ns, api.CreateTrigger{Name: "guarded", TriggerFields: api.TriggerFields{
		Type: ptr.To(api.TriggerHTTP), Function: ptr.To("guarded"), Enabled: ptr.To(true), RequireAuth: ptr.To(true)}}); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(d.endpoint, "http://")

	// The unauthenticated calls and the unknown function are answered before their body is
	// read; the connection still may not stay open for the rest of it (net/http reads it
	// before it answers), nor past the body timeout. A /fn/ body may not pause for the body
	// idle bound, an asynchronous call's must arrive within the body timeout. All at once,
	// while the server answers others.
	cases := []struct {
		path, status string
		header       []string
	}{
		{"/v1/namespaces/" + d.ns + "/functions", "401", nil},
		{"/fn/" + d.ns + "/echo", "408", nil},
		{"/fn/" + d.ns + "/nope", "404", nil},
		{"/fn/" + d.ns + "/guarded", "401", nil},
		{"/fn/" + d.ns + "/echo", "408", []string{"Prefer: respond-async"}},
	}
	var slow sync.WaitGroup
	for _, c := range cases {
		slow.Add(1)
		go func() {
			defer slow.Done()
			status, closed := testkit.Trickle(t, addr, "", c.path, time.Second, 30*time.Second, c.header...)
			if !strings.Contains(status, " "+c.status+" ") || closed > 5*time.Second {
				t.Errorf("POST %s %v with a trickling body: %q, closed after %s; want %s and closed within 5s", c.path, c.header, status, closed.Round(time.Millisecond), c.status)
			}
		}()
	}
	testkit.Responsive(t, d.endpoint+"/healthz", 5, 300*time.Millisecond)
	slow.Wait()

	// 2,000 clients each send one request and then keep the connection idle.
	const idle = 2000
	conns := make([]net.Conn, 0, idle)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range idle {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	}
	var closed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
			if _, err := io.Copy(io.Discard, c); err == nil { // EOF: the server closed it
				closed.Add(1)
			}
		}()
	}
	// Meanwhile the server answers others at once.
	for range 5 {
		start := time.Now()
		resp, err := http.Get(d.endpoint + "/healthz")
		if err != nil {
			t.Fatalf("healthz while %d connections are held: %v", idle, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || time.Since(start) > 2*time.Second {
			t.Fatalf("healthz while %d connections are held: %d after %s", idle, resp.StatusCode, time.Since(start))
		}
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	if n := closed.Load(); n != idle {
		t.Fatalf("%d of %d idle keep-alive connections closed by the server, want all", n, idle)
	}
}

// TestDevConnectionCap: a connection beyond --max-connections gets 503 and is closed.
func TestDevConnectionCap(t *testing.T) {
	d := startDevSession(t, "--max-connections", "20")
	addr := strings.TrimPrefix(d.endpoint, "http://")
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(200 * time.Millisecond)                                         // accepted
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // no connection from before the 20
	resp, err := fresh.Get(d.endpoint + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close || !strings.Contains(string(body), "too many open connections") {
		t.Fatalf("request beyond the cap: %d close=%v %s, want 503 and the connection closed", resp.StatusCode, resp.Close, body)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(d.endpoint + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz after the held connections closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDevCrashLeavesNoFunctionChildren: when sless dev is killed with SIGKILL, its function
// processes die with it (Pdeathsig), and what they forked is killed by the next start on the
// same data directory.
func TestDevCrashLeavesNoFunctionChildren(t *testing.T) {
	dir := devDataDir(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out testkit.Buffer
	cmd := exec.Command(exe, "-test.run=^$", "--", "dev", "--data-dir", dir, "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "SLESS_TEST_AS_CLI=1")
	cmd.Stdout, cmd.Stderr = &out, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	d := sessionOf(t, waitOutput(t, &out, "export SLESS_TOKEN=", time.Minute))
	d.deployPython(t, "forker", "import subprocess\nchildren = []\n\ndef handle(event):\n    children.append(subprocess.Popen(['sleep', '300']))\n    return children[-1].pid\n", 0)
	resp, err := http.Post(d.endpoint+"/fn/"+d.ns+"/forker", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var child int
	if _, err := fmt.Sscan(string(body), &child); err != nil || child <= 0 {
		t.Fatalf("forker answered %d %q", resp.StatusCode, body)
	}
	// Once sless dev is dead, any pool on this machine that starts (another test's) reaps its
	// control groups, killing what runs there, and may take its sandbox user, killing what
	// runs as it. The test moves the child out of the dead pool's groups and takes the user's
	// lock the moment it is free, holding it over the restart, so only the restart's
	// process-group records can kill the child.
	leavePoolCgroups(t, child)
	locked := holdSandboxUser(t, child)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	select {
	case <-locked:
	case <-time.After(30 * time.Second):
		t.Fatal("the dead sless dev's sandbox user lock was not free within 30 s")
	}
	time.Sleep(200 * time.Millisecond)
	if !running(child) {
		t.Fatal("the forked child died with sless dev already; the test cannot show the restart kills it")
	}
	out2, stop := runDevCmd(t, "--data-dir", dir, "--listen", "127.0.0.1:0")
	waitOutput(t, out2, "export SLESS_TOKEN=", time.Minute)
	deadline := time.Now().Add(5 * time.Second)
	for running(child) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(child, syscall.SIGKILL)
			t.Fatalf("process %d forked by a function outlived the restart of sless dev", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// leavePoolCgroups moves pid out of the control groups of a pool (sless-<pid>-<n> in v1,
// sless/ in v2) into the group the pool was started in.
func leavePoolCgroups(t *testing.T, pid int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3) // hierarchy-ID:controllers:path
		if len(f) != 3 {
			continue
		}
		i := strings.Index(f[2]+"/", "/sless-")
		if f[1] == "" { // v2
			i = strings.Index(f[2]+"/", "/sless/")
		}
		if i < 0 {
			continue
		}
		dir := filepath.Join("/sys/fs/cgroup", strings.TrimPrefix(f[1], "name="), f[2][:i])
		if f[1] == "" {
			dir = filepath.Join("/sys/fs/cgroup", f[2][:i])
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatalf("moving %d out of %s: %v", pid, f[2], err)
		}
	}
}

// holdSandboxUser waits, in the background, for the lock of the sandbox user pid runs as and
// holds it until the test ends; the channel closes once it is held (at once without a sandbox).
func holdSandboxUser(t *testing.T, pid int) <-chan struct{} {
	t.Helper()
	held := make(chan struct{})
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d", pid), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid < pool.FirstSandboxUID {
		close(held)
		return held
	}
	dir, err := pool.SandboxLockDir()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(int(st.Uid))), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	go func() {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err == nil {
			close(held)
		}
	}()
	return held
}

// running reports whether pid is a live process (not gone, not a zombie).
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] != 'Z'
}
