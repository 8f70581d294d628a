package devplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/history"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testkit"
)

// leaker gives its secret back every way a function can: printed on stdout and stderr, in
// a 500's body, in an exception (the wrapper's traceback), before crashing mid-request, and
// after a delay (a call still running when the secret rotates).
const leaker = `import os, sys, time
S = os.environ["DB_PASSWORD"]

def handle(event, request=None):
    how = event.get("how", "")
    print("stdout says", S, flush=True)
    print("stderr says", S, file=sys.stderr, flush=True)
    if how == "fail":
        return {"statusCode": 500, "body": "failed with " + S}
    if how == "raise":
        raise RuntimeError("raised with " + S)
    if how == "crash":
        print("crashing with", S, file=sys.stderr, flush=True)
        os._exit(1)
    if how == "slow":
        print("slow call running", flush=True)
        time.sleep(1.5)
        print("late with", S, flush=True)
    return {"value": S}
`

// startLeaker prints its secret at start-up and exits: the pool's start-up error quotes it.
const startLeaker = `import os, sys
print("starting with", os.environ["DB_PASSWORD"], flush=True)
sys.exit(3)

def handle(event, request=None):
    return None
`

// TestPrintedSecretInNoSink: a function that references a secret prints and answers its
// value every way it can (stdout, stderr, a 500 body, a traceback, a crash mid-request and at
// start-up, an asynchronous result and error, a job's result and output), the secret
// rotates while a call still runs on the old value, and all of it again with the new value.
// Neither value is in any sink: sless dev's own log (its slog handler: the pool's "function
// output" lines, crash warnings, the gateway's and the dev plane's), the logs API (function,
// build and job), the spans, the invocation history and asynchronous results, the API's
// views, and every file of the data directory (state, logs, queues) — while the logs API
// shows the lines with *** in place of the value.
func TestPrintedSecretInNoSink(t *testing.T) {
	spans := recordSpans()
	platformLog := &testkit.Buffer{} // sless dev's own log, written by its handler
	// The call that runs across the rotation has time to finish on the process being
	// replaced however loaded the machine.
	d := startDev(t, devOptions{logOut: platformLog, stopGrace: 20 * time.Second})
	ctx := context.Background()
	values := []string{"sink-value-4f1d-first", "sink-value-8c2a-second"}
	if _, err := d.client.CreateSecret(ctx, d.ns, api.CreateSecret{Name: "db", SecretFields: api.SecretFields{Data: map[string]string{"password": values[0]}}}); err != nil {
		t.Fatal(err)
	}
	fields := api.FunctionFields{Async: &api.AsyncFields{Enabled: ptr.To(true), MaxAttempts: ptr.To(int32(1))}}
	fields.SecretEnv = &[]api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}}
	if fn := d.deploy("leaker", "python3.12", map[string]string{"handler.py": leaker}, fields); !fn.Status.Ready {
		t.Fatalf("leaker: %+v", fn.Status)
	}
	if fn := d.deploy("startleaker", "python3.12", map[string]string{"handler.py": startLeaker}, api.FunctionFields{SecretEnv: fields.SecretEnv}); !fn.Status.Ready {
		t.Fatalf("startleaker: %+v", fn.Status)
	}

	var asyncIDs []string
	var slow string
	for round, value := range values {
		// The value is what the function runs with (and what a caller may be answered).
		testkit.WaitFor(t, "the function to run with value "+fmt.Sprint(round), time.Minute, func() bool {
			code, body := d.invoke("leaker", `{}`)
			return code == 200 && strings.Contains(body, value)
		})
		for _, how := range []string{"fail", "raise", "crash"} {
			if code, _ := d.invoke("leaker", `{"how": "`+how+`"}`); code < 500 {
				t.Errorf("how=%s answered %d, want a failure", how, code)
			}
		}
		if code, body := d.invoke("startleaker", `{}`); code != 502 {
			t.Errorf("the start-up crash answered %d %s, want 502", code, body)
		}
		for _, how := range []string{"", "fail", "raise"} {
			resp, inv := d.callAsync("leaker", `{"how": "`+how+`"}`, nil)
			if resp.StatusCode != 202 {
				t.Fatalf("async how=%s: %d", how, resp.StatusCode)
			}
			asyncIDs = append(asyncIDs, inv.ID)
		}
		job := fmt.Sprintf("job%d", round)
		if _, err := d.client.CreateJob(ctx, d.ns, api.CreateJob{Name: job, JobFields: api.JobFields{Function: ptr.To("leaker"), RunID: ptr.To(int64(1))}}); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, "job "+job, time.Minute, func() bool {
			j := must(d.client.GetJob(ctx, d.ns, job))
			return j.Status.Phase == api.JobSucceeded || j.Status.Phase == api.JobFailed
		})
		if round == 0 {
			// Rotate while a call runs on the old value: its late line and its answer come
			// after the rotation, from the process being replaced.
			resp, inv := d.callAsync("leaker", `{"how": "slow"}`, nil)
			if resp.StatusCode != 202 {
				t.Fatalf("async slow: %d", resp.StatusCode)
			}
			slow = inv.ID
			asyncIDs = append(asyncIDs, slow)
			// Running in the handler, not only recorded as running: the dispatcher's call may
			// still be on its way to a process then, and reach the replacement.
			testkit.WaitFor(t, "the slow call to reach its process", 30*time.Second, func() bool {
				_, lines := d.logs("/functions/leaker/logs", d.token)
				return len(withText(lines, "slow call running")) == 1
			})
			if _, err := d.client.UpdateSecret(ctx, d.ns, "db", api.SecretFields{Data: map[string]string{"password": values[1]}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	invs := d.settle(asyncIDs, time.Minute)
	if s := invs[len(invs)-4]; s.ID != slow || s.Status != history.AsyncSucceeded || !strings.Contains(string(s.Result), rules.SecretMask) {
		t.Errorf("the call answered across the rotation: %+v, want succeeded with its answer masked", s)
	}
	for wait := time.Now(); strings.Count(platformLog.String(), "function process crashed") < 2; time.Sleep(100 * time.Millisecond) {
		if time.Since(wait) > 30*time.Second {
			t.Fatal("no crash warnings in sless dev's log")
		}
	}

	// Every sink the API shows, the logs API's masked lines among them.
	sinks := map[string]string{"sless dev's log": platformLog.String()}
	_, fnLines := d.logs("/functions/leaker/logs", d.token)
	for _, want := range []string{"stdout says ***", "stderr says ***", "raised with ***", "crashing with ***", "late with ***"} {
		if n := len(withText(fnLines, want)); n < 2 && !(n == 1 && want == "late with ***") {
			t.Errorf("the logs API shows %d lines with %q, want one for each value at least", len(withText(fnLines, want)), want)
		}
	}
	views := map[string]any{"function logs": fnLines, "invocations": d.invocations("leaker"), "start-up invocations": d.invocations("startleaker"),
		"async": invs, "leaker": must(d.client.GetFunction(ctx, d.ns, "leaker")), "startleaker": must(d.client.GetFunction(ctx, d.ns, "startleaker")),
		"revisions": must(d.client.ListRevisions(ctx, d.ns, "leaker")), "job0": must(d.client.GetJob(ctx, d.ns, "job0")), "job1": must(d.client.GetJob(ctx, d.ns, "job1"))}
	for _, path := range []string{"/functions/startleaker/logs", "/functions/leaker/builds/latest/logs", "/jobs/job0/logs", "/jobs/job1/logs"} {
		_, lines := d.logs(path, d.token)
		views[path] = lines
	}
	if msg := views["startleaker"].(api.Function).Status.Message; !strings.Contains(msg, "starting with "+rules.SecretMask) {
		t.Errorf("the start-up crash's status message %q, want its output masked", msg)
	}
	for name, v := range views {
		sinks[name] = string(must(json.Marshal(v)))
	}
	var allSpans strings.Builder
	for _, sp := range spans.Ended() {
		allSpans.WriteString(spanText(sp) + "\n")
	}
	sinks["spans"] = allSpans.String()
	if !strings.Contains(allSpans.String(), "starting with "+rules.SecretMask) {
		t.Error("no span quotes the start-up error, masked")
	}
	d.stop()
	err := filepath.WalkDir(d.dataDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		sinks[path] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for sink, text := range sinks {
		for _, v := range values {
			if i := strings.Index(text, v); i >= 0 {
				t.Errorf("%s holds a secret value: …%s…", sink, text[max(0, i-200):min(len(text), i+len(v)+50)])
			}
		}
	}
}
