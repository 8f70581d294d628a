//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// talkPython prints a line per call, so its log shows each invocation.
const talkPython = `def handle(event):
    print("E2E-LOG", event.get("name"), flush=True)
    return "said " + str(event.get("name"))
`

// brokenPython does not compile: its build fails with Python's message.
const brokenPython = "def handle(event)\n    return 1\n"

// functionDir writes a Python function's handler.py into work/name and returns the folder.
func functionDir(t *testing.T, work, name, code string) string {
	t.Helper()
	dir := filepath.Join(work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "handler.py"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// slessCLI runs the real sless binary against the ground's gateway with a config dir of its own.
type slessCLI struct {
	t         *testing.T
	configDir string
}

func (c slessCLI) command(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, g.tools["sless"], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+c.configDir, "SLESS_ENDPOINT=", "SLESS_TOKEN=")
	return cmd
}

// loggedIn is the CLI logged in to the ground's gateway as tn, and a work folder.
func loggedIn(t *testing.T, tn tenant) (slessCLI, string) {
	t.Helper()
	cli := slessCLI{t: t, configDir: t.TempDir()}
	work := t.TempDir()
	tokenFile := filepath.Join(work, "token")
	if err := os.WriteFile(tokenFile, []byte(tn.token), 0o600); err != nil {
		t.Fatal(err)
	}
	cli.ok(work, "login", "--endpoint", g.gatewayURL, "--token-file", tokenFile)
	return cli, work
}

// run returns stdout, stderr and the exit code of `sless args...`.
func (c slessCLI) run(dir string, args ...string) (string, string, int) {
	c.t.Helper()
	// A hang guard only: `sless deploy` bounds its own wait (10 minutes) but leaves out the
	// time the operator holds the build for a slot (client.HeldForBuildSlot), and on a fresh
	// machine the journeys' builds queue behind each other for longer than that (11 ahead,
	// each compiling without a kaniko layer cache). A slow build still ends with its message.
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	cmd := c.command(ctx, dir, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("sless %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), code
}

func (c slessCLI) ok(dir string, args ...string) (string, string) {
	c.t.Helper()
	out, errOut, code := c.run(dir, args...)
	if code != 0 {
		c.t.Fatalf("sless %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out, errOut
}

// follower is a running `sless logs -f`, its stdout collected line by line.
type follower struct {
	mu    sync.Mutex
	lines []string
	stop  context.CancelFunc
	done  chan struct{}
}

func (c slessCLI) follow(dir string, args ...string) *follower {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := c.command(ctx, dir, append([]string{"logs", "-f"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	f := &follower{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f.mu.Lock()
			f.lines = append(f.lines, sc.Text())
			f.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	c.t.Cleanup(func() { cancel(); <-f.done })
	return f
}

func (f *follower) has(text string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.lines {
		if strings.Contains(l, text) {
			return true
		}
	}
	return false
}

// TestCLIJourneyCluster drives the real sless binary against the cluster's gateway: login,
// init and deploy a template, deploy (kaniko), invoke with a cold start, `sless logs -f` started while the function is at
// zero showing the output of the replica the call woke and then of warm calls — the pods' logs
// through the API server's pods/log and the kubelet's container-log endpoint — a build's
// own output with `logs --build`, ls and rm.
func TestCLIJourneyCluster(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	cli, work := loggedIn(t, tn)

	// The newcomer's path: a template, deployed and invoked as it comes.
	cli.ok(work, "init", "hello", "--runtime", "node")
	if out, _ := cli.ok(filepath.Join(work, "hello"), "deploy"); !strings.Contains(out, "function hello is Ready") {
		t.Fatalf("deploy of the node template: %q", out)
	}
	waitServiceResolvable(t, tn, "hello")
	if out, _ := cli.ok(work, "invoke", "hello", "-d", `{"name":"cluster"}`); !strings.Contains(out, "cluster") {
		t.Fatalf("invoke of the node template: %q", out)
	}

	talk := functionDir(t, work, "talk", talkPython)
	out, progress := cli.ok(talk, "deploy", "--timeout", "30s")
	// The URL is the one the operator is configured with (the gateway's in-cluster address).
	if !strings.Contains(out, "function talk is Ready: http") || !strings.Contains(out, "/fn/"+tn.ns+"/talk") || !strings.Contains(progress, "function talk created (python3.11)") {
		t.Fatalf("deploy: stdout %q\nstderr %q", out, progress)
	}
	waitServiceResolvable(t, tn, "talk")

	// Followed from zero: no pod yet; the call's cold start brings one, whose lines appear.
	f := cli.follow(work, "talk")
	time.Sleep(time.Second)
	out, verbose := cli.ok(work, "invoke", "talk", "-d", `{"name":"cold"}`, "-v")
	if strings.TrimSpace(out) != `said cold` || !strings.Contains(verbose, "cold start  true") {
		t.Fatalf("cold invoke: %q\n%s", out, verbose)
	}
	waitFor(t, 30*time.Second, "the woken replica's line in sless logs -f", func() bool { return f.has("E2E-LOG cold") })
	for _, name := range []string{"warm1", "warm2"} {
		cli.ok(work, "invoke", "talk", "-d", `{"name":"`+name+`"}`)
	}
	waitFor(t, 30*time.Second, "the warm calls' lines in sless logs -f", func() bool { return f.has("E2E-LOG warm1") && f.has("E2E-LOG warm2") })
	f.mu.Lock()
	sample := f.lines[len(f.lines)-1]
	f.mu.Unlock()
	if !strings.Contains(sample, "talk-") { // time, instance (the pod), line
		t.Errorf("a followed line names no instance: %q", sample)
	}

	// Not followed: the lines so far, the last ones with --tail: the last call's handler line
	// and the two calls' invocation records, never the first call's handler line. (The
	// wrapper writes its records every 50 ms, so two quick calls' records may both come after
	// the second handler line.)
	out, _ = cli.ok(work, "logs", "talk", "--tail", "3")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.Contains(out, "E2E-LOG warm2") || strings.Contains(out, "warm1") {
		t.Errorf("logs --tail 3: %q", out)
	}
	if out, _ = cli.ok(work, "logs", "talk", "--since", "10m"); !strings.Contains(out, "E2E-LOG cold") || !strings.Contains(out, "E2E-LOG warm1") {
		t.Errorf("logs --since 10m: %q", out)
	}

	// A build that fails: deploy exits 3, and the kaniko pod's own output is readable.
	broken := functionDir(t, work, "broken", brokenPython)
	if _, errOut, code := cli.run(broken, "deploy"); code != 3 || !strings.Contains(errOut, "function broken failed to build") {
		t.Fatalf("broken deploy: exit %d\n%s", code, errOut)
	}
	if out, _ = cli.ok(work, "logs", "broken", "--build"); !strings.Contains(out, "SyntaxError") {
		t.Errorf("logs --build of a failed build: %q", out)
	}

	if out, _ = cli.ok(work, "ls", "functions"); !strings.Contains(out, "talk") || !strings.Contains(out, "broken") {
		t.Errorf("ls functions: %q", out)
	}
	cli.ok(work, "rm", "function", "broken", "talk", "hello")
	waitFor(t, time.Minute, "sless ls to show no function after rm", func() bool {
		out, _ := cli.ok(work, "ls", "functions", "-o", "json")
		return strings.TrimSpace(out) == "[]"
	})
}
