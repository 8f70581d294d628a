package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/utils/ptr"

	"sless.dev/sless/cmd/sless/cli"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testkit"
)

// The CLI's names the journeys check, as its own tests name them.
const (
	exitUsage  = cli.ExitUsage
	exitFailed = cli.ExitFailed
)

type (
	cliConfig       = cli.Config
	functionDetails = cli.FunctionDetails
	secretDetails   = cli.SecretDetails
)

var exitCodeOf = cli.ExitCode

// secretMarker is a value no output or error may show.
const secretMarker = "marker-5f1e0b-value"

// cliCommandNamed makes the CLI's command name on its own, as main adds it to the root.
func cliCommandNamed(name string) func() *cobra.Command {
	return func() *cobra.Command {
		for _, c := range cli.Commands() {
			if c.Name() == name {
				return c
			}
		}
		panic("no CLI command " + name)
	}
}

// cliRunner runs this test binary as the sless CLI (TestMain's SLESS_TEST_AS_CLI) in a
// folder, with its own config directory and none of the caller's SLESS_ENDPOINT/TOKEN.
type cliRunner struct {
	t         *testing.T
	configDir string
	env       []string // more variables, e.g. SLESS_TOKEN=bad
}

// result is one run of the CLI.
type result struct {
	stdout, stderr string
	code           int
}

// at is the runner for a subtest, which must fail itself rather than its parent.
func (c cliRunner) at(t *testing.T) cliRunner {
	c.t = t
	return c
}

func (c cliRunner) command(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"--"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SLESS_TEST_AS_CLI=1", "XDG_CONFIG_HOME="+c.configDir, "SLESS_ENDPOINT=", "SLESS_TOKEN=")
	cmd.Env = append(cmd.Env, c.env...)
	return cmd
}

// run runs `sless args...` in dir with stdin (nil: /dev/null, as a terminal would be).
func (c cliRunner) run(dir string, stdin io.Reader, args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := c.command(ctx, dir, args...)
	cmd.Stdin = stdin
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		c.t.Fatalf("sless %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// ok runs the CLI and fails the test unless it exits 0.
func (c cliRunner) ok(dir string, stdin io.Reader, args ...string) result {
	c.t.Helper()
	r := c.run(dir, stdin, args...)
	if r.code != 0 {
		c.t.Fatalf("sless %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// fails runs the CLI and fails the test unless it exits with code and says want on stderr.
func (c cliRunner) fails(code int, want, dir string, args ...string) result {
	c.t.Helper()
	r := c.run(dir, nil, args...)
	if r.code != code || !strings.Contains(r.stderr, want) {
		c.t.Fatalf("sless %s: exit %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, code, want, r.stdout, r.stderr)
	}
	return r
}

func decodeJSON[T any](t *testing.T, text string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		t.Fatalf("not the JSON expected (%v):\n%s", err, text)
	}
	return v
}

func mustMatch(t *testing.T, what, text, pattern string) {
	t.Helper()
	if !regexp.MustCompile(pattern).MatchString(text) {
		t.Fatalf("%s: nothing matches %s in:\n%s", what, pattern, text)
	}
}

func mustContain(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Fatalf("%s: no %q in:\n%s", what, w, text)
		}
	}
}

// echoHandler answers with what reached it, prints a marker line, and fails on request.
const echoHandler = `import sys


def handle(event, request=None):
    if event.get("fail"):
        raise RuntimeError("asked to fail")
    print("echo " + str(event.get("say", "")))
    print("to stderr", file=sys.stderr)
    return {"event": event, "request": request}
`

// TestCLIJourney is the README's path for a newcomer, through the real binary against a real
// `sless dev`: log in, init, deploy (a compile error exits 3 with the compiler's message),
// invoke (-d, @file, stdin, headers, cold start), logs (tail, json, build, follow), ls/get/
// describe in every format, triggers off and on, jobs run, rm, and the exit codes.
func TestCLIJourney(t *testing.T) {
	work, configDir := t.TempDir(), t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", configDir) // for the in-process `sless dev --login`
	t.Setenv("SLESS_ENDPOINT", "")
	t.Setenv("SLESS_TOKEN", "")
	out, _ := runDevCmd(t, "--data-dir", devDataDir(t), "--listen", "127.0.0.1:0", "--login")
	d := sessionOf(t, waitOutput(t, out, "export SLESS_TOKEN=", time.Minute))
	endpoint, token, c := d.endpoint, d.token, d.c
	ctx := context.Background()
	ns := d.ns
	cli := cliRunner{t: t, configDir: configDir}

	t.Run("login", func(t *testing.T) {
		mustContain(t, "banner", out.String(), "CLI        logged in")
		checkConfig(t, configDir, endpoint, token)
		// sless login into another config directory, the token from a file.
		other := cliRunner{t: t, configDir: t.TempDir()}
		tokenFile := filepath.Join(work, "token")
		if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		other.fails(1, "no sless endpoint configured", work, "ls", "functions")
		r := other.ok(work, nil, "login", "--endpoint", endpoint, "--token-file", tokenFile)
		mustContain(t, "login", r.stdout, "as dev (namespace "+ns+")")
		checkConfig(t, other.configDir, endpoint, token)
		other.ok(work, strings.NewReader(token), "login", "--token-file", "-") // the saved endpoint, stdin
		other.fails(1, "run `sless login`", work, "login", "--token", "not-a-jwt")
		checkConfig(t, other.configDir, endpoint, token) // a refused token is not saved
		// The environment wins over the config.
		withEnv := cliRunner{t: t, configDir: configDir, env: []string{"SLESS_TOKEN=not-a-jwt"}}
		withEnv.fails(1, "the token is missing, invalid or expired", work, "ls", "functions")
	})

	hello := filepath.Join(work, "hello")
	t.Run("init", func(t *testing.T) {
		cli := cli.at(t)
		r := cli.ok(work, nil, "init", "hello", "--runtime", "python")
		mustContain(t, "init", r.stdout, "wrote handler.py, sless.yaml in hello", "sless deploy")
		cli.fails(1, "never overwrites", work, "init", "hello", "--runtime", "python")
		cli.fails(exitUsage, "--runtime is required", work, "init", "x")
		cli.ok(work, nil, "init", "gofn", "--runtime", "go")
		cli.ok(work, nil, "init", "nodefn", "--runtime", "node")
	})

	t.Run("deploy", func(t *testing.T) {
		cli := cli.at(t)
		r := cli.ok(hello, nil, "deploy")
		mustContain(t, "deploy stdout", r.stdout, "function hello is Ready: "+endpoint+"/fn/"+ns+"/hello")
		mustContain(t, "deploy progress", r.stderr, "function hello created (python3.11)", "uploaded 1 file", "| [sless] building python3.11", "function hello: Ready")
		r = cli.ok(filepath.Join(work, "nodefn"), nil, "deploy", "--env", "GREETING=hi")
		mustContain(t, "node deploy", r.stderr, "created (nodejs20)")
		if fn, _ := c.GetFunction(ctx, ns, "nodefn"); fn.EnvVars["GREETING"] != "hi" {
			t.Fatalf("--env: %+v", fn.EnvVars)
		}

		// A Go compile error: exit 3 with the compiler's message; the fix deploys.
		gofn := filepath.Join(work, "gofn")
		good, _ := os.ReadFile(filepath.Join(gofn, "handler.go"))
		bad := strings.Replace(string(good), `name, _ := event["name"].(string)`, `name, _ = event["name"].(string)`, 1)
		if err := os.WriteFile(filepath.Join(gofn, "handler.go"), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		r = cli.fails(exitFailed, "function gofn failed to build", gofn, "deploy")
		mustContain(t, "compile error", r.stderr, "undefined: name", "sless logs gofn --build")
		// Once: streamed with the build's output, which the log's last line and the error
		// refer to rather than repeat.
		if n := strings.Count(r.stderr, "handler.go:9:2: undefined: name"); n != 1 {
			t.Errorf("the compiler's message is printed %d times, want once:\n%s", n, r.stderr)
		}
		if err := os.WriteFile(filepath.Join(gofn, "handler.go"), good, 0o644); err != nil {
			t.Fatal(err)
		}
		r = cli.ok(gofn, nil, "deploy")
		mustContain(t, "go deploy after the fix", r.stdout, "function gofn is Ready")
		cli.fails(exitUsage, "holds python code", hello, "deploy", "--name", "gofn")
		cli.fails(exitUsage, "--env", hello, "deploy", "--env", "NOEQUALS")

		echo := filepath.Join(work, "echo")
		if err := os.MkdirAll(echo, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(echo, "handler.py"), []byte(echoHandler), 0o644); err != nil {
			t.Fatal(err)
		}
		cli.ok(work, nil, "deploy", echo, "--timeout", "30s", "--async")
		if fn, _ := c.GetFunction(ctx, ns, "echo"); fn.TimeoutSec != 30 || !fn.Async.Enabled {
			t.Fatalf("--timeout 30s --async: %d %+v", fn.TimeoutSec, fn.Async)
		}
	})

	t.Run("invoke", func(t *testing.T) {
		cli := cli.at(t)
		r := cli.ok(work, nil, "invoke", "hello", "-d", `{"name":"you"}`, "-v")
		mustContain(t, "first call", r.stdout, "hello, you")
		mustContain(t, "first call -v", r.stderr, "status      200 OK", "duration", "cold start  true")
		r = cli.ok(work, nil, "invoke", "hello", "-v")
		mustContain(t, "second call", r.stdout, "hello, world")
		mustContain(t, "second call -v", r.stderr, "cold start  false")
		mustContain(t, "stdin", cli.ok(work, strings.NewReader(`{"name":"stdin"}`), "invoke", "hello").stdout, "hello, stdin")
		event := filepath.Join(work, "event.json")
		if err := os.WriteFile(event, []byte(`{"name":"file"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		mustContain(t, "-d @file", cli.ok(work, nil, "invoke", "hello", "-d", "@"+event).stdout, "hello, file")
		for _, rt := range []string{"gofn", "nodefn"} {
			mustContain(t, rt, cli.ok(work, nil, "invoke", rt, "-d", `{"name":"`+rt+`"}`).stdout, "hello, "+rt)
		}

		r = cli.ok(work, nil, "invoke", "echo", "-X", "PUT", "--path", "/orders/7?full=1", "-H", "X-Trace: abc", "-H", "Authorization: Bearer mine", "-d", `{"say":"hi"}`)
		got := decodeJSON[struct {
			Event   map[string]any `json:"event"`
			Request struct {
				Method  string            `json:"method"`
				Path    string            `json:"path"`
				Query   map[string]string `json:"query"`
				Headers map[string]string `json:"headers"`
			} `json:"request"`
		}](t, r.stdout)
		req := got.Request
		if got.Event["say"] != "hi" || req.Method != "PUT" || req.Path != "/orders/7" || req.Query["full"] != "1" ||
			req.Headers["x-trace"] != "abc" || req.Headers["content-type"] != "application/json" || req.Headers["authorization"] != "" {
			t.Fatalf("what reached the function: %s", r.stdout)
		}
		r = cli.fails(exitFailed, "function echo answered 500", work, "invoke", "echo", "-d", `{"fail":true}`)
		mustContain(t, "a failing function's body", r.stdout, "asked to fail")
		cli.fails(1, "`sless ls functions`", work, "invoke", "nope")
		cli.fails(exitUsage, "-H", work, "invoke", "hello", "-H", "nocolon")

		// Asynchronous calls: accepted, followed to the outcome, refused where async is off.
		r = cli.ok(work, nil, "invoke", "echo", "--async", "-d", `{"say":"queued"}`)
		mustContain(t, "--async", r.stdout, `"status": "queued"`, `"max_attempts": 3`)
		r = cli.ok(work, nil, "invoke", "echo", "--async", "--wait", "-d", `{"say":"later"}`)
		mustContain(t, "--async --wait", r.stdout, `"event":{"say":"later"}`, `"x-sless-attempt":"1"`)
		mustContain(t, "--async --wait progress", r.stderr, "succeeded (attempt 1 of 3)")
		r = cli.fails(exitFailed, "failed after 3 attempts", work, "invoke", "echo", "--async", "--wait", "-d", `{"fail":true}`)
		mustContain(t, "a failed asynchronous call", r.stderr, "HTTP 500")
		cli.fails(1, "async.enabled", work, "invoke", "hello", "--async")
		cli.fails(exitUsage, "add --async", work, "invoke", "hello", "--wait")
	})

	t.Run("logs", func(t *testing.T) {
		cli := cli.at(t)
		var r result
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(r.stdout, "greeting file"); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no greeting of the last call in the logs:\n%s", r.stdout)
			}
			r = cli.ok(work, nil, "logs", "hello")
		}
		mustMatch(t, "logs", r.stdout, `(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \S+ stdout greeting you$`)
		if lines := strings.Split(strings.TrimSpace(cli.ok(work, nil, "logs", "echo", "--tail", "1").stdout), "\n"); len(lines) != 1 {
			t.Fatalf("--tail 1: %q", lines)
		}
		var last api.LogLine
		for _, l := range strings.Split(strings.TrimSpace(cli.ok(work, nil, "logs", "echo", "-o", "json", "--since", "10m").stdout), "\n") {
			last = decodeJSON[api.LogLine](t, l)
			if last.Time.IsZero() || last.Instance == "" {
				t.Fatalf("-o json line: %s", l)
			}
		}
		mustContain(t, "--build", cli.ok(work, nil, "logs", "gofn", "--build").stdout, " build - [sless] building go1.25")
		cli.fails(exitUsage, "not both", work, "logs", "hello", "--build", "--job", "x")
		cli.fails(1, "`sless ls functions`", work, "logs", "nope")

		// -f: a line printed by a call made while following arrives.
		fctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		follow := cli.command(fctx, work, "logs", "echo", "-f", "--tail", "1")
		pipe, err := follow.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := follow.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = follow.Wait() }()
		defer cancel() // kills the follower (exec.CommandContext)
		lines := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(pipe)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		<-lines // the --tail line: the stream is open
		cli.ok(work, nil, "invoke", "echo", "-d", `{"say":"while-following"}`)
		for deadline := time.After(10 * time.Second); ; {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatal("sless logs -f ended")
				}
				if strings.HasSuffix(l, " stdout echo while-following") {
					return
				}
			case <-deadline:
				t.Fatal("sless logs -f did not print the line of the call made while following")
			}
		}
	})

	if _, err := c.CreateTrigger(ctx, ns, api.CreateTrigger{Name: "hello-http", TriggerFields: api.TriggerFields{Type: ptr.To(api.TriggerHTTP), Function: ptr.To("hello")}}); err != nil {
		t.Fatal(err)
	}
	t.Run("read commands", func(t *testing.T) {
		cli := cli.at(t)
		r := cli.ok(work, nil, "ls", "functions")
		mustContain(t, "ls functions", r.stdout, "NAME", "RUNTIME", "PHASE", "echo ", "gofn ", "go1.25", "hello ", "python3.11", "Ready")
		fns := decodeJSON[[]api.Function](t, cli.ok(work, nil, "ls", "fn", "-o", "json").stdout)
		if len(fns) != 4 || fns[0].Name != "echo" {
			t.Fatalf("ls -o json: %+v", fns)
		}
		mustContain(t, "ls -o yaml", cli.ok(work, nil, "ls", "functions", "-o", "yaml").stdout, "created_at: ", "name: hello\n")
		fn := decodeJSON[api.Function](t, cli.ok(work, nil, "get", "function", "hello", "-o", "json").stdout)
		if fn.Name != "hello" || !fn.Status.Ready || fn.Status.URL == "" {
			t.Fatalf("get -o json: %+v", fn)
		}
		mustContain(t, "get -o yaml", cli.ok(work, nil, "get", "function", "hello", "-o", "yaml").stdout, "runtime: python3.11", "ready: true")
		mustContain(t, "get table", cli.ok(work, nil, "get", "function", "hello").stdout, "NAME", "hello")

		r = cli.ok(work, nil, "describe", "function", "hello")
		mustContain(t, "describe", r.stdout, "Triggers:\n  NAME", "hello-http", "Recent invocations:\n  START", "succeeded")
		mustMatch(t, "describe", r.stdout, `(?m)^Runtime: +python3.11$`)
		mustMatch(t, "describe", r.stdout, `(?m)^Protocol: +http1$`)
		mustMatch(t, "describe", r.stdout, `(?m)^URL: +`+regexp.QuoteMeta(endpoint+"/fn/"+ns+"/hello")+`$`)
		d := decodeJSON[functionDetails](t, cli.ok(work, nil, "describe", "function", "hello", "-o", "json").stdout)
		if d.Function.Name != "hello" || len(d.Triggers) != 1 || len(d.Invocations) < 4 || !d.Invocations[len(d.Invocations)-1].ColdStart {
			t.Fatalf("describe -o json: %+v", d)
		}
		mustContain(t, "describe -o yaml", cli.ok(work, nil, "describe", "fn", "hello", "-o", "yaml").stdout, "function:\n", "invocations:\n", "triggers:\n")
		mustContain(t, "ls triggers", cli.ok(work, nil, "ls", "triggers").stdout, "hello-http", "http", "true")
		r = cli.ok(work, nil, "describe", "trigger", "hello-http")
		mustMatch(t, "describe trigger", r.stdout, `(?m)^Type: +http$`)
		mustMatch(t, "describe trigger", r.stdout, `(?m)^Function: +hello$`)
		mustContain(t, "no jobs", cli.ok(work, nil, "ls", "jobs").stderr, "no jobs in namespace "+ns)
		if jobs := decodeJSON[[]api.Job](t, cli.ok(work, nil, "ls", "jobs", "-o", "json").stdout); len(jobs) != 0 {
			t.Fatalf("ls jobs -o json: %+v", jobs)
		}
		cli.fails(exitUsage, "want functions, triggers, jobs or secrets", work, "ls", "bogus")
		cli.fails(exitUsage, "-o xml", work, "ls", "functions", "-o", "xml")
		cli.fails(exitUsage, "accepts 2 arg(s)", work, "describe", "function")
		cli.fails(1, "`sless ls triggers` lists them", work, "get", "trigger", "nope")
	})

	t.Run("triggers", func(t *testing.T) {
		cli := cli.at(t)
		mustContain(t, "disable", cli.ok(work, nil, "triggers", "disable", "hello-http").stdout, "trigger hello-http disabled")
		cli.fails(1, "its http trigger is off", work, "invoke", "hello")
		mustContain(t, "ls disabled", cli.ok(work, nil, "get", "trigger", "hello-http").stdout, "false")
		cli.ok(work, nil, "triggers", "enable", "hello-http")
		mustContain(t, "enabled again", cli.ok(work, nil, "invoke", "hello").stdout, "hello, world")
		cli.fails(1, "trigger nope", work, "triggers", "enable", "nope")
	})

	t.Run("jobs", func(t *testing.T) {
		cli := cli.at(t)
		event := json.RawMessage(`{"say":"job"}`)
		for _, name := range []string{"echo-job", "fail-job"} {
			if _, err := c.CreateJob(ctx, ns, api.CreateJob{Name: name, JobFields: api.JobFields{Function: ptr.To("echo"), Event: &event}}); err != nil {
				t.Fatal(err)
			}
		}
		r := cli.ok(work, nil, "jobs", "run", "echo-job")
		mustContain(t, "jobs run", r.stdout, `"say"`, `"job"`)
		mustContain(t, "jobs run progress", r.stderr, "job echo-job: run 1 requested", "run 1 succeeded")
		j := decodeJSON[api.Job](t, cli.ok(work, nil, "jobs", "run", "echo-job", "--event", `{"say":"again"}`, "-o", "json").stdout)
		if j.Status.ObservedRunID != 2 || j.Status.Phase != api.JobSucceeded || !strings.Contains(j.Status.Result, "again") {
			t.Fatalf("jobs run -o json: %+v", j)
		}
		mustContain(t, "logs --job", cli.ok(work, nil, "logs", "--job", "echo-job").stdout, "[sless] run 2", "stdout echo again")
		r = cli.fails(exitFailed, "job fail-job run 1 failed", work, "jobs", "run", "fail-job", "--event", `{"fail":true}`)
		mustContain(t, "failed run", r.stderr, "asked to fail")
		cli.fails(exitUsage, "--event is not JSON", work, "jobs", "run", "echo-job", "--event", "{")
		cli.fails(1, "`sless ls jobs` lists them", work, "jobs", "run", "nope")
	})

	t.Run("revisions", func(t *testing.T) {
		cli := cli.at(t)
		dir := filepath.Join(work, "canary")
		cli.ok(work, nil, "init", "canary", "--runtime", "python")
		cli.ok(dir, nil, "deploy")
		call := func(header ...string) (string, string) {
			req, _ := http.NewRequest(http.MethodPost, endpoint+"/fn/"+ns+"/canary", strings.NewReader(`{"name":"x"}`))
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.Header.Get(rules.HeaderRevision), string(b)
		}
		handler := filepath.Join(dir, "handler.py")
		src, _ := os.ReadFile(handler)
		if err := os.WriteFile(handler, []byte(strings.Replace(string(src), `f"hello, {name}"`, `f"bonjour, {name}"`, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		r := cli.ok(dir, nil, "deploy", "--no-traffic", "--tag", "beta")
		mustContain(t, "deploy --no-traffic", r.stdout, "function canary is Ready")
		if rev, body := call(); rev != "canary-1" || !strings.Contains(body, "hello, x") {
			t.Fatalf("after --no-traffic the call went to %s: %s", rev, body)
		}
		if rev, body := call(rules.HeaderTag, "beta"); rev != "canary-2" || !strings.Contains(body, "bonjour, x") {
			t.Fatalf("the tag beta reached %s: %s", rev, body)
		}
		r = cli.ok(work, nil, "revisions", "canary")
		mustMatch(t, "revisions", r.stdout, `canary-1\s+ready\s+100%\s+-`)
		mustMatch(t, "revisions", r.stdout, `canary-2\s+ready\s+0%\s+beta`)
		revs := decodeJSON[[]api.Revision](t, cli.ok(work, nil, "revisions", "canary", "-o", "json").stdout)
		if len(revs) != 2 || revs[1].Tags[0] != "beta" {
			t.Fatalf("revisions -o json: %+v", revs)
		}
		mustContain(t, "traffic", cli.ok(work, nil, "traffic", "canary", "latest=100").stdout, "function canary: traffic latest 100%")
		testkit.WaitFor(t, "canary-2 to take the calls", 10*time.Second, func() bool { rev, _ := call(); return rev == "canary-2" })
		cli.fails(1, "percents sum to 90", work, "traffic", "canary", "canary-1=40", "latest=50")
		cli.fails(1, "canary-9 does not exist", work, "traffic", "canary", "canary-9=100")
		cli.fails(exitUsage, "want <revision|latest>=<percent>", work, "traffic", "canary", "canary-1")
		mustContain(t, "rollback", cli.ok(work, nil, "rollback", "canary").stdout, "function canary: all traffic on canary-1")
		testkit.WaitFor(t, "canary-1 to take the calls back", 10*time.Second, func() bool { rev, _ := call(); return rev == "canary-1" })
		mustContain(t, "bare ls", cli.ok(work, nil, "ls").stdout, "canary", "hello")
		mustContain(t, "bare rm", cli.ok(work, nil, "rm", "canary").stdout, "function canary deleted")
		cli.fails(1, "function canary", work, "rm", "canary")
	})

	t.Run("rm", func(t *testing.T) {
		cli := cli.at(t)
		mustContain(t, "rm", cli.ok(work, nil, "rm", "job", "fail-job", "echo-job").stdout, "job fail-job deleted\njob echo-job deleted\n")
		cli.ok(work, nil, "rm", "function", "nodefn")
		cli.fails(1, "`sless ls functions` lists them", work, "get", "function", "nodefn")
		cli.fails(1, "function nodefn", work, "rm", "function", "nodefn")
	})

	t.Run("completion", func(t *testing.T) {
		cli := cli.at(t)
		r := cli.ok(work, nil, "__complete", "invoke", "")
		mustContain(t, "function names", r.stdout, "echo\n", "hello\n")
		mustContain(t, "kinds", cli.ok(work, nil, "__complete", "get", "").stdout, "function\n", "triggers\n")
		mustContain(t, "trigger names", cli.ok(work, nil, "__complete", "triggers", "disable", "").stdout, "hello-http\n")
		mustContain(t, "bash", cli.ok(work, nil, "completion", "bash").stdout, "bash completion V2 for sless")
	})
}

// checkConfig checks the saved config: the endpoint and token, readable by the user only.
func checkConfig(t *testing.T, configDir, endpoint, token string) {
	t.Helper()
	path := filepath.Join(configDir, "sless", "config.json")
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 || dir.Mode().Perm() != 0o700 {
		t.Fatalf("config %v, its folder %v; want 0600 and 0700", info.Mode().Perm(), dir.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if cfg := decodeJSON[cliConfig](t, string(data)); cfg.Endpoint != endpoint || cfg.Token != token {
		t.Fatalf("config: %s", data)
	}
}

// runCLIIn is runCLI with stdin, returning stdout and stderr apart.
func runCLIIn(t *testing.T, stdin string, mk func() *cobra.Command, args ...string) (string, string, error) {
	t.Helper()
	cmd := mk()
	var out, errOut bytes.Buffer
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true // as the root command is
	err := cmd.ExecuteContext(t.Context())
	return out.String(), errOut.String(), err
}

// TestSecretCommands drives sless secret and the generic verbs against `sless dev`: create,
// ls, get, describe (with the functions and triggers that use it), set (a rotation), rm
// (refused while referenced, naming the function), describe function's references — and no
// output or error ever holds a value.
func TestSecretCommands(t *testing.T) {
	newSecretCmd, newLsCmd, newGetCmd, newDescribeCmd, newRmCmd := cliCommandNamed("secret"), cliCommandNamed("ls"), cliCommandNamed("get"), cliCommandNamed("describe"), cliCommandNamed("rm")
	d := startDevSession(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("SLESS_ENDPOINT", d.endpoint)
	t.Setenv("SLESS_TOKEN", d.token)
	ctx := context.Background()
	binary := append([]byte("\xff\xfe\x00"), secretMarker...)
	certFile := filepath.Join(t.TempDir(), "cert.der")
	if err := os.WriteFile(certFile, binary, 0o600); err != nil {
		t.Fatal(err)
	}
	var said []string // everything the CLI printed, checked for values at the end
	run := func(stdin string, mk func() *cobra.Command, args ...string) (string, error) {
		t.Helper()
		out, errOut, err := runCLIIn(t, stdin, mk, args...)
		said = append(said, out, errOut)
		if err != nil {
			said = append(said, err.Error())
		}
		return out + errOut, err
	}
	ok := func(mk func() *cobra.Command, args ...string) string {
		t.Helper()
		out, err := run("", mk, args...)
		if err != nil {
			t.Fatalf("sless %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	fails := func(code int, want string, mk func() *cobra.Command, args ...string) {
		t.Helper()
		out, err := run("", mk, args...)
		if exitCodeOf(err) != code || !strings.Contains(err.Error(), want) {
			t.Fatalf("sless %s: %v (exit %d), want exit %d saying %q\n%s", strings.Join(args, " "), err, exitCodeOf(err), code, want, out)
		}
	}

	out := ok(newSecretCmd, "create", "db", "--from-literal", "password="+secretMarker, "--from-file", "cert="+certFile)
	mustContain(t, "create", out, "secret db created with 2 keys: cert, password")
	ok(newSecretCmd, "create", "other", "--from-literal", "k=v")
	fails(1, "`sless secret set db` replaces its data", newSecretCmd, "create", "db", "--from-literal", "password=x")
	fails(exitUsage, "--from-literal (the 1st one)", newSecretCmd, "create", "x", "--from-literal", secretMarker)
	fails(exitUsage, "no data", newSecretCmd, "create", "x")

	out = ok(newSecretCmd, "ls")
	mustMatch(t, "secret ls", out, `(?m)^NAME\s+KEYS\s+VERSION\s+UPDATED\s+AGE$`)
	mustMatch(t, "secret ls", out, `(?m)^db\s+cert,password\s+1\s`)
	if out2 := ok(newLsCmd, "secrets"); out2 != out {
		t.Errorf("sless ls secrets and sless secret ls differ:\n%s\n%s", out2, out)
	}
	list := decodeJSON[[]api.Secret](t, ok(newLsCmd, "secrets", "-o", "json"))
	if len(list) != 2 || list[0].Name != "db" || list[0].Version != 1 || strings.Join(list[0].Keys, ",") != "cert,password" {
		t.Errorf("ls secrets -o json: %+v", list)
	}
	mustContain(t, "get secret -o yaml", ok(newGetCmd, "secret", "db", "-o", "yaml"), "name: db", "version: 1", "- cert")

	// A function and an event trigger that use it.
	if _, err := d.c.CreateFunction(ctx, d.ns, api.CreateFunction{Name: "api", FunctionFields: api.FunctionFields{Runtime: ptr.To("python3.11"),
		SecretEnv:   &[]api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}},
		SecretFiles: &[]api.SecretFile{{Secret: "db"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.CreateTrigger(ctx, d.ns, api.CreateTrigger{Name: "orders", TriggerFields: api.TriggerFields{Type: ptr.To(api.TriggerEvent),
		Function: ptr.To("api"), Queue: ptr.To(d.ns + ".orders"), BrokerSecret: ptr.To("db"), BrokerSecretKey: ptr.To("password")}}); err != nil {
		t.Fatal(err)
	}
	out = ok(newSecretCmd, "describe", "db")
	mustContain(t, "secret describe", out, "Keys:", "cert, password", "Version:", "Used by:")
	mustMatch(t, "secret describe", out, `function\s+api\s+DB_PASSWORD ← db/password`)
	mustMatch(t, "secret describe", out, `function\s+api\s+files: db → /var/sless/secrets/db`)
	mustMatch(t, "secret describe", out, `trigger\s+orders\s+broker URL ← db/password`)
	if out2 := ok(newDescribeCmd, "secret", "db"); out2 != out {
		t.Errorf("sless describe secret and sless secret describe differ:\n%s\n%s", out2, out)
	}
	det := decodeJSON[secretDetails](t, ok(newDescribeCmd, "secret", "db", "-o", "json"))
	if det.Secret.Name != "db" || len(det.UsedBy) != 3 {
		t.Errorf("describe secret -o json: %+v", det)
	}
	mustContain(t, "describe other", ok(newSecretCmd, "describe", "other"), "Used by:\n  none")
	mustContain(t, "describe function", ok(newDescribeCmd, "function", "api"),
		"Secrets:\n  DB_PASSWORD ← db/password\n  files: db → /var/sless/secrets/db\n")

	// Rotation: the whole data replaced, from stdin here.
	out, err := run(secretMarker+"-2", newSecretCmd, "set", "db", "--from-file", "password=-")
	if err != nil {
		t.Fatalf("secret set: %v\n%s", err, out)
	}
	mustContain(t, "secret set", out, "secret db rotated to version 2; functions that reference it roll")
	if s, err := d.c.GetSecret(ctx, d.ns, "db"); err != nil || s.Version != 2 || strings.Join(s.Keys, ",") != "password" {
		t.Errorf("after set: %+v, %v", s, err)
	}
	fails(1, "`sless secret create nope` creates it", newSecretCmd, "set", "nope", "--from-literal", "a=b")

	// rm: refused while referenced, naming who; then deleted.
	fails(1, "function api", newSecretCmd, "rm", "db")
	fails(1, "`sless describe secret db` shows the references", newRmCmd, "secret", "db")
	fails(1, "`sless ls secrets` lists them", newSecretCmd, "rm", "nope")
	if err := d.c.DeleteTrigger(ctx, d.ns, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.UpdateFunction(ctx, d.ns, "api", api.FunctionFields{SecretEnv: &[]api.SecretEnv{}, SecretFiles: &[]api.SecretFile{}}); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "secret rm", ok(newSecretCmd, "rm", "db"), "secret db deleted")
	mustContain(t, "rm secret", ok(newRmCmd, "secret", "other"), "secret other deleted")
	mustContain(t, "secret ls, none", ok(newSecretCmd, "ls"), "no secrets in namespace "+d.ns)

	b64 := base64.StdEncoding.EncodeToString(binary)
	for _, s := range said {
		if strings.Contains(s, "marker-") || strings.Contains(s, b64) {
			t.Errorf("the CLI showed a value:\n%s", s)
		}
	}
}
