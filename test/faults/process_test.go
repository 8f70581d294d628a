//go:build faults

package faults

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procSpec describes a child process of the suite.
type procSpec struct {
	name string   // also names its log file
	argv []string // command and arguments
	env  []string // added to the suite's environment
	dir  string   // working directory; default the suite's
	// user runs the process as another OS user (PostgreSQL refuses to run as root).
	user *syscall.Credential
	// orphanSignal reaches the process if the suite dies first; default SIGKILL. Servers
	// with children of their own get the signal that makes them stop those too.
	orphanSignal syscall.Signal
}

// proc is a running child; its stdout and stderr go to a log file of the suite.
type proc struct {
	spec procSpec
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed once it exited; err is its exit status
	err  error
}

// startProc starts spec. The suite's SLESS_* variables are not passed on: every setting a
// scenario depends on is given explicitly.
func startProc(spec procSpec) (*proc, error) {
	logPath := filepath.Join(s.dir, "logs", spec.name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log file of %s: %w", spec.name, err)
	}
	fmt.Fprintf(f, "=== %s %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(spec.argv, " "))
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = spec.dir, f, f
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLESS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, spec.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: spec.orphanSignal, Credential: spec.user}
	if spec.orphanSignal == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", spec.name, err)
	}
	p := &proc{spec: spec, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// startProcT starts spec for one test: killed at its end, its log tail shown if it failed.
func startProcT(t *testing.T, spec procSpec) *proc {
	t.Helper()
	p, err := startProc(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.signal(syscall.SIGKILL, 10*time.Second)
		if t.Failed() {
			t.Logf("last lines of %s:\n%s", p.log, p.tail(40))
		}
	})
	return p
}

// signal sends sig and waits up to within for the process to exit.
func (p *proc) signal(sig syscall.Signal, within time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s to %s: %w", sig, p.spec.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(within):
		return fmt.Errorf("%s did not exit within %s of %s", p.spec.name, within, sig)
	}
}

// kill is kill -9: no chance to flush, drain or say goodbye.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.signal(syscall.SIGKILL, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// wait waits up to within for the process to exit by itself.
func (p *proc) wait(within time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(within):
		return fmt.Errorf("%s still running after %s", p.spec.name, within)
	}
}

func (p *proc) tail(lines int) string {
	data, _ := os.ReadFile(p.log)
	all := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	return string(bytes.Join(all[max(0, len(all)-lines):], []byte("\n")))
}

// freePort picks a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// until polls cond every 50 ms until it holds or timeout passes, or p (if any) exits.
func until(timeout time.Duration, p *proc, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if p != nil {
			select {
			case <-p.done:
				return fmt.Errorf("%s exited (%v); see %s", p.spec.name, p.err, p.log)
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// healthy reports whether url answers 200.
func healthy(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// historyShortfall is what a process's log says its history may miss: invocations it aborted
// when the broker connection went (recorded as failed although the function may have run;
// the message runs again) and records its writer dropped with a full buffer.
func (p *proc) historyShortfall() int {
	data, _ := os.ReadFile(p.log)
	text := string(data)
	dropped := 0
	for _, m := range droppedTotal.FindAllStringSubmatch(text, -1) {
		if n, err := strconv.Atoi(m[1]); err == nil {
			dropped = max(dropped, n)
		}
	}
	return strings.Count(text, "invocation aborted by stop or connection loss") + dropped
}

// droppedTotal finds the history writer's drop counter in JSON and text log lines.
var droppedTotal = regexp.MustCompile(`droppedTotal"?[=:](\d+)`)
