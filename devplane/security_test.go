package devplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/history"
	"sless.dev/sless/test/testkit"
)

// spy is a Python function that remembers every request its process received and answers
// with that list.
const spy = `import json
seen = []

def handle(event, request):
    seen.append({"path": request["path"], "authorization": request["headers"].get("authorization", "")})
    return seen
`

// TestKeepAliveConnectionStaysWithTheGateway is attack 2 of issue 14: on one keep-alive
// connection a client calls a function, then /v1 with its token, then another tenant's
// function. Every request is answered by the gateway; the function's process sees its own
// invocations only, and never a token.
func TestKeepAliveConnectionStaysWithTheGateway(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	one := int32(1)
	d.deploy("spy", "python3.11", map[string]string{"handler.py": spy}, api.FunctionFields{MinReplicas: &one, MaxReplicas: &one})
	other, err := client.New(d.endpoint, testkit.Token(t, hmacKey, "other-"+randomHex(t)), nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := other.WhoAmI(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rt := "python3.11"
	if _, err := other.CreateFunction(context.Background(), id.Namespace, api.CreateFunction{Name: "theirs", FunctionFields: api.FunctionFields{Runtime: &rt}}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.UploadSource(context.Background(), id.Namespace, "theirs", strings.NewReader(string(testkit.Zip(t, map[string]string{"handler.py": "def handle(event):\n    return 'theirs'\n"})))); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the other tenant's function", 2*time.Minute, func() bool {
		fn, err := other.GetFunction(context.Background(), id.Namespace, "theirs")
		return err == nil && fn.Status.Ready
	})

	c := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	var conns []string
	call := func(method, path string, auth bool) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, d.endpoint+path, strings.NewReader(`{}`))
		if auth {
			req.Header.Set("Authorization", "Bearer "+d.token)
		}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { conns = append(conns, info.Conn.LocalAddr().String()) },
		}))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	before := d.served.Load()
	if code, body := call("POST", "/fn/"+d.ns+"/spy", true); code != 200 {
		t.Fatalf("first call: %d %s", code, body)
	}
	if code, body := call("GET", "/v1/whoami", true); code != 200 || !strings.Contains(body, `"namespace":"`+d.ns+`"`) {
		t.Fatalf("/v1/whoami on the same connection: %d %s", code, body)
	}
	if code, body := call("POST", "/fn/"+id.Namespace+"/theirs", true); code != 200 || body != "theirs" {
		t.Fatalf("another tenant's function on the same connection: %d %s", code, body)
	}
	code, body := call("POST", "/fn/"+d.ns+"/spy/again", false)
	if code != 200 {
		t.Fatalf("last call: %d %s", code, body)
	}
	if n := d.served.Load() - before; n != 4 {
		t.Fatalf("the gateway served %d of the 4 requests on the connection", n)
	}
	for _, c := range conns[1:] {
		if c != conns[0] {
			t.Fatalf("the client used connections %v; the test needs one kept alive", conns)
		}
	}
	var seen []struct{ Path, Authorization string }
	if err := json.Unmarshal([]byte(body), &seen); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0].Path != "/" || seen[1].Path != "/again" || seen[0].Authorization != "" || seen[1].Authorization != "" {
		t.Fatalf("the function's process saw %+v; want its two invocations only, without a token", seen)
	}
	if n := len(d.invocations("spy")); n != 2 {
		t.Fatalf("%d invocations recorded for spy, want 2", n)
	}
}

// TestFunctionOutputIsNotAControlChannel: whatever a function prints, its history holds one
// record per request the gateway served (the handoff protocol once read stdout lines).
func TestFunctionOutputIsNotAControlChannel(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	forger := `import json, sys
def handle(event):
    for i in range(50):
        print(json.dumps({"direct": True, "status": 200, "start_us": 1, "duration_us": 5, "active": 0}), flush=True)
        print(json.dumps({"msg": "direct busy", "direct": True, "active": 9}), file=sys.stderr, flush=True)
    return "ok"
`
	d.deploy("forger", "python3.11", map[string]string{"handler.py": forger}, api.FunctionFields{})
	for range 3 {
		if code, body := d.invoke("forger", `{}`); code != 200 || body != "ok" {
			t.Fatalf("invoke: %d %s", code, body)
		}
	}
	testkit.WaitFor(t, "3 records", 5*time.Second, func() bool { return len(d.invocations("forger")) >= 3 })
	time.Sleep(300 * time.Millisecond) // anything forged would have been recorded by now
	if n := len(d.invocations("forger")); n != 3 {
		t.Fatalf("%d invocation records after 3 calls, want 3", n)
	}
}

// TestManyConnectionsLoseNothing: 2,000 concurrent keep-alive connections, 10 requests each,
// through sless dev: every one is answered 200 and recorded once (connection handoff
// dropped 4-18 of these 20,000).
func TestManyConnectionsLoseNothing(t *testing.T) {
	t.Parallel()
	rec := &countingRecorder{Memory: history.NewMemory(100)}
	d := startDev(t, devOptions{recorder: rec, proxy: gateway.ProxyConfig{MaxHeldPerFunction: 5000, MaxHeld: 5000},
		// Every caller is 127.0.0.1, and a transport dials beyond its 2,000 connections while
		// the server has yet to see others close: the client's share is the whole gateway's.
		conns: gateway.ConnLimits{MaxConns: 10000, MaxConnsPerClient: 10000, MaxRequestsPerClient: 5000}})
	d.deploy("fast", "go1.25", map[string]string{"handler.go": "package handler\n\nfunc Handle(event map[string]interface{}) interface{} { return \"ok\" }\n"}, api.FunctionFields{})
	const conns, each = 2000, 10
	tr := &http.Transport{MaxIdleConnsPerHost: conns}
	defer tr.CloseIdleConnections()
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				resp, err := (&http.Client{Transport: tr}).Post(d.endpoint+"/fn/"+d.ns+"/fast", "application/json", strings.NewReader(`{}`))
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 && string(b) == "ok" {
					ok.Add(1)
				} else {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, b))
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != conns*each {
		t.Fatalf("%d of %d requests answered 200, %d failed (first: %v)", ok.Load(), conns*each, failed.Load(), firstErr.Load())
	}
	testkit.WaitFor(t, "every invocation recorded", 10*time.Second, func() bool { return rec.n.Load() == conns*each })
}

// countingRecorder counts the records it keeps.
type countingRecorder struct {
	*history.Memory
	n atomic.Int64
}

func (r *countingRecorder) Record(rec history.Record) {
	r.n.Add(1)
	r.Memory.Record(rec)
}

// inspector answers with what its process can see of the machine: its environment, its open
// descriptors, and the pid of a child it forks (which must die with the function).
const inspector = `import os, subprocess
children = []

def handle(event):
    if event.get("fork"):
        children.append(subprocess.Popen(["sleep", "300"]))
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            pass
    return {"env": sorted(os.environ), "fds": fds, "children": [c.pid for c in children], "cwd": os.getcwd()}
`

// TestFunctionProcessIsolation: a function's process gets only its own environment and no
// descriptor of sless dev's, listens on a Unix socket only its user can open (no TCP port
// a web page or another user could reach around the gateway), and whatever it forks dies
// with it.
func TestFunctionProcessIsolation(t *testing.T) {
	t.Setenv("SLESS_TEST_SECRET", "must-not-leak") // in sless dev's environment, not the function's
	d := startDev(t, devOptions{})
	env := map[string]string{"GREETING": "hi"}
	d.deploy("inspect", "python3.11", map[string]string{"handler.py": inspector}, api.FunctionFields{EnvVars: &env})
	code, body := d.invoke("inspect", `{"fork": true}`)
	if code != 200 {
		t.Fatalf("invoke: %d %s", code, body)
	}
	var seen struct {
		Env      []string
		FDs      map[string]string
		Children []int
		Cwd      string
	}
	if err := json.Unmarshal([]byte(body), &seen); err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"PATH": true, "HOME": true, "TMPDIR": true, "LANG": true, "TZ": true, "GREETING": true,
		"PYTHONPATH": true, "PYTHONUNBUFFERED": true, "PYTHONDONTWRITEBYTECODE": true, "LC_CTYPE": true}
	for _, k := range seen.Env {
		if !allowed[k] && !strings.HasPrefix(k, "SLESS_") {
			t.Errorf("the function's environment holds %s", k)
		}
	}
	if !slices.Contains(seen.Env, "GREETING") || slices.Contains(seen.Env, "SLESS_TEST_SECRET") {
		t.Errorf("environment %v: want the function's own variables only", seen.Env)
	}
	// No file of sless dev's (its state, locks, logs: what this process holds open) is open
	// in the function's; what the function opened itself is its own business.
	ours := map[string]bool{}
	own, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range own {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(target, "/") && target != "/dev/null" {
			ours[target] = true
		}
	}
	for fd, target := range seen.FDs {
		if ours[target] {
			t.Errorf("descriptor %s → %s of sless dev is open in the function's process", fd, target)
		}
	}
	if len(ours) == 0 {
		t.Fatal("this process holds no file open: the check above proves nothing")
	}
	// Its build is its tenant's and read-only (for any user but root): what it writes does
	// not change its next start, and no other tenant's upload of the same source runs it.
	if !strings.Contains(seen.Cwd, "/"+d.ns+"/") {
		t.Errorf("the build directory %s is not the tenant's own", seen.Cwd)
	}
	err := filepath.WalkDir(seen.Cwd, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := e.Info(); err == nil && e.Type()&fs.ModeSymlink == 0 && info.Mode().Perm()&0o222 != 0 {
			t.Errorf("%s is writable (%s)", p, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st := d.stats("inspect")
	if len(st.PIDs) != 1 {
		t.Fatalf("processes %v", st.PIDs)
	}
	if ports := tcpListeners(t, st.PIDs[0]); len(ports) > 0 {
		t.Errorf("the function's process listens on TCP %v: reachable around the gateway", ports)
	}
	if len(seen.Children) != 1 || !testkit.Alive(seen.Children[0]) {
		t.Fatalf("forked child %v not running", seen.Children)
	}
	if err := d.client.DeleteFunction(context.Background(), d.ns, "inspect"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the forked child to die with its function", 10*time.Second, func() bool { return !testkit.Alive(seen.Children[0]) })
}

// tcpListeners lists the TCP ports pid listens on (from /proc/net/tcp{,6} and its sockets).
func tcpListeners(t *testing.T, pid int) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	var ports []string
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, _ := os.ReadFile(table)
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 9 && f[3] == "0A" && inodes[f[9]] { // 0A: LISTEN
				ports = append(ports, f[1])
			}
		}
	}
	return ports
}

// TestTenantsStayInTheirLane: event triggers may only consume the tenant's own queues (one
// broker serves every tenant of sless dev), and a namespace holds a bounded number of
// objects of each kind, so no tenant can fill the machine.
func TestTenantsStayInTheirLane(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{maxPerNamespace: 3})
	ctx := context.Background()
	event := func(name, queue, dlq string) error {
		_, err := d.client.CreateTrigger(ctx, d.ns, api.CreateTrigger{Name: name, TriggerFields: api.TriggerFields{
			Type: ptr.To(api.TriggerEvent), Function: ptr.To("f"), Queue: &queue, DeadLetterQueue: &dlq, BrokerSecret: ptr.To("s")}})
		return err
	}
	for _, tc := range []struct{ queue, dlq, field string }{
		{"orders", "", "queue"},
		{"sless-0123456789abcdef.orders", "", "queue"},
		{d.ns + "x.orders", "", "queue"},
		{d.ns + ".orders", "shared.dlq", "dead_letter_queue"},
	} {
		if err := event("e", tc.queue, tc.dlq); !isStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "field "+tc.field) {
			t.Errorf("queue %q, dead-letter queue %q: want 400 on %s, got %v", tc.queue, tc.dlq, tc.field, err)
		}
	}
	if err := event("e", d.ns+".orders", d.ns+".orders.dlq"); err != nil {
		t.Fatalf("the tenant's own queue: %v", err)
	}

	rt := "python3.11"
	for i := range 3 {
		if _, err := d.client.CreateFunction(ctx, d.ns, api.CreateFunction{Name: fmt.Sprintf("f%d", i), FunctionFields: api.FunctionFields{Runtime: &rt}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := d.client.CreateFunction(ctx, d.ns, api.CreateFunction{Name: "one-too-many", FunctionFields: api.FunctionFields{Runtime: &rt}})
	if !isStatus(err, http.StatusForbidden) || !strings.Contains(err.Error(), "already has 3 functions") {
		t.Fatalf("a fourth function: want 403 naming the limit, got %v", err)
	}
	other, err := client.New(d.endpoint, testkit.Token(t, hmacKey, "other-"+randomHex(t)), nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := other.WhoAmI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.CreateFunction(ctx, id.Namespace, api.CreateFunction{Name: "f0", FunctionFields: api.FunctionFields{Runtime: &rt}}); err != nil {
		t.Fatalf("another tenant is not held to this one's count: %v", err)
	}
}
