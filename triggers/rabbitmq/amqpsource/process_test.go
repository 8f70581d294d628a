package amqpsource_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sless.dev/sless/dispatcher"
	"sless.dev/sless/test/testkit"
	"sless.dev/sless/triggers/rabbitmq/amqpsource"
)

// startChild runs the dispatcher in a child process (this test binary, see TestMain).
func startChild(t *testing.T, spec childSpec) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	js, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SLESS_TEST_DISPATCHER_CHILD="+string(js))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, &out
}

func waitExit(t *testing.T, cmd *exec.Cmd, out *bytes.Buffer, timeout time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("dispatcher process did not exit within %s; output:\n%s", timeout, out)
		return -1
	}
}

// gatedFnServer is a function server whose invocations after the first free wait, up to
// 30 s, until the test closes gate.
func gatedFnServer(t *testing.T, free int32) (f *fnServer, gate chan struct{}) {
	t.Helper()
	gate = make(chan struct{})
	var started atomic.Int32
	f = newFnServer(t, func(string, int) (int, time.Duration) {
		if started.Add(1) > free {
			select {
			case <-gate:
			case <-time.After(30 * time.Second):
			}
		}
		return http.StatusOK, 0
	})
	return f, gate
}

func assertAllProcessed(t *testing.T, f *fnServer, q string, n int) {
	t.Helper()
	calls, _ := f.snapshot()
	for i := range n {
		if calls[strconv.Itoa(i)] == 0 {
			t.Fatalf("message %d was never invoked: lost", i)
		}
	}
	if d := depth(t, q); d != 0 {
		t.Fatalf("queue holds %d messages, want 0", d)
	}
}

func TestSIGKILLMidStreamLosesNothing(t *testing.T) {
	q := newQueue(t)
	const n = 400
	publish(t, q, n, nil)
	// Past the first quarter, invocations wait at a gate that opens after the kill, so the
	// process surely dies with messages delivered but unacked.
	f, gate := gatedFnServer(t, n/4)
	spec := childSpec{Queue: q, Target: f.URL, Concurrency: 8, ExitWhenEmpty: true, Backoff: 10 * time.Millisecond}
	cmd, out := startChild(t, spec)
	testkit.WaitFor(t, "a quarter of the messages invoked", 30*time.Second, func() bool { c, _ := f.snapshot(); return len(c) >= n/4 })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = waitExit(t, cmd, out, 10*time.Second)
	close(gate)

	cmd, out = startChild(t, spec)
	if code := waitExit(t, cmd, out, 60*time.Second); code != 0 {
		t.Fatalf("restarted dispatcher exited %d:\n%s", code, out)
	}
	assertAllProcessed(t, f, q, n)
}

func TestSIGTERMDrainsInFlight(t *testing.T) {
	q := newQueue(t)
	const n = 20
	publish(t, q, n, nil)
	f := newFnServer(t, func(string, int) (int, time.Duration) { return http.StatusOK, 500 * time.Millisecond })
	spec := childSpec{Queue: q, Target: f.URL, Concurrency: 4, Backoff: 10 * time.Millisecond}
	cmd, out := startChild(t, spec)
	testkit.WaitFor(t, "4 invocations in flight", 20*time.Second, func() bool { _, s := f.snapshot(); return s >= 4 })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd, out, 10*time.Second); code != 0 {
		t.Fatalf("drained dispatcher exited %d:\n%s", code, out)
	}
	calls, started := f.snapshot()
	if len(calls) != started || started == 0 || started >= n {
		t.Fatalf("%d invocations started but %d finished (of %d): in-flight work was cut off", started, len(calls), n)
	}
	if d := depth(t, q); d != n-started {
		t.Fatalf("queue holds %d after the drain, want the %d unprocessed", d, n-started)
	}
	// A second dispatcher finishes the rest; nothing the first one completed runs again.
	cmd, out = startChild(t, childSpec{Queue: q, Target: f.URL, Concurrency: 4, ExitWhenEmpty: true})
	if code := waitExit(t, cmd, out, 30*time.Second); code != 0 {
		t.Fatalf("second dispatcher exited %d:\n%s", code, out)
	}
	calls, _ = f.snapshot()
	for id, c := range calls {
		if c != 1 {
			t.Fatalf("message %s invoked %d times after a graceful drain, want once", id, c)
		}
	}
	assertAllProcessed(t, f, q, n)
}

// TestBrokerClosesConnection has RabbitMQ close the dispatcher's connection mid-stream (as on
// a broker restart or an operator action); the dispatcher reconnects and finishes.
func TestBrokerClosesConnection(t *testing.T) {
	ctl := os.Getenv("SLESS_RABBITMQCTL")
	if ctl == "" {
		ctl = "rabbitmqctl"
	}
	if _, err := exec.LookPath(ctl); err != nil {
		t.Fatalf("this test needs rabbitmqctl of the broker at %s (set SLESS_RABBITMQCTL): %v", testkit.AMQPURL(t), err)
	}
	q := newQueue(t)
	const n = 500
	publish(t, q, n, nil)
	// After the first fifth, invocations wait at a gate that opens once the connection was
	// closed, so the close surely lands mid-stream however slow rabbitmqctl is.
	f, gate := gatedFnServer(t, n/5)
	cfg := config(t, q, f)
	cfg.ConnectionName = q // unique: the test finds the connection by it
	cfg.Concurrency = 4
	type result struct {
		st  dispatcher.Stats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := amqpsource.Run(context.Background(), cfg)
		done <- result{st, err}
	}()
	testkit.WaitFor(t, "a fifth of the messages invoked", 30*time.Second, func() bool { c, _ := f.snapshot(); return len(c) >= n/5 })
	closeConnection(t, ctl, q)
	close(gate)
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("dispatcher did not finish after the connection was closed")
	}
	assertAllProcessed(t, f, q, n)
}

func closeConnection(t *testing.T, ctl, connectionName string) {
	t.Helper()
	out, err := exec.Command(ctl, "list_connections", "-q", "--no-table-headers", "pid", "client_properties").CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl list_connections: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if pid, props, ok := strings.Cut(line, "\t"); ok && strings.Contains(props, connectionName) {
			if out, err := exec.Command(ctl, "close_connection", pid, "closed by test").CombinedOutput(); err != nil {
				t.Fatalf("rabbitmqctl close_connection %q: %v\n%s", pid, err, out)
			}
			return
		}
	}
	t.Fatalf("connection %q not found in:\n%s", connectionName, out)
}
