package devplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"k8s.io/utils/ptr"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/devplane"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend/backendtest"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/history"
	"sless.dev/sless/test/pgtest"
	"sless.dev/sless/test/testkit"
)

// TestUploadInvokeScaleToZero: per runtime, upload → invoke from zero → scale to zero after
// the scale-down period → invoke again (a new cold start).
func TestUploadInvokeScaleToZero(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	cases := []struct {
		name, runtime, example, want string
	}{
		{"hello-go", "go1.25", "hello-go", `"message":"hello, sless"`},
		{"hello-python", "python3.11", "hello-python", `"message":"hello, sless"`},
		{"hello-node", "nodejs20", "hello-node", `"message":"hello, sless"`},
	}
	for _, tc := range cases {
		t.Run(tc.runtime, func(t *testing.T) {
			fn := d.deploy(tc.name, tc.runtime, exampleFiles(t, tc.example), api.FunctionFields{ScaleDownPeriodSec: ptr.To[int32](1)})
			if !fn.Status.Ready {
				t.Fatalf("not Ready: %+v", fn.Status)
			}
			if s := d.stats(tc.name); s.Processes != 0 {
				t.Fatalf("min_replicas 0: no process before the first request, got %+v", s)
			}
			code, body := d.invoke(tc.name, `{"name":"sless"}`)
			if code != http.StatusOK || !strings.Contains(body, tc.want) {
				t.Fatalf("first invocation: %d %s", code, body)
			}
			pids := d.stats(tc.name).PIDs
			if len(pids) != 1 {
				t.Fatalf("one process after the cold start, got %v", pids)
			}
			testkit.WaitFor(t, "scale to zero", 10*time.Second, func() bool { return d.stats(tc.name).Processes == 0 && !testkit.Alive(pids[0]) })
			code, body = d.invoke(tc.name, `{"name":"sless"}`)
			if code != http.StatusOK || !strings.Contains(body, tc.want) {
				t.Fatalf("invocation after scale to zero: %d %s", code, body)
			}
			if again := d.stats(tc.name).PIDs; len(again) != 1 || again[0] == pids[0] {
				t.Fatalf("want a new process after scale to zero, had %v now %v", pids, again)
			}
		})
	}
}

func TestConcurrentColdRequests(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	const maxProcs = 3
	d.deploy("burst", "python3.11", map[string]string{"handler.py": testkit.SteerablePython},
		api.FunctionFields{MaxReplicas: ptr.To[int32](maxProcs), ScalingTarget: ptr.To[int32](2)})
	maxSeen, failed := testkit.Burst(50,
		func() (int, string) { return d.invoke("burst", `{"sleep": 0.05}`) },
		func() int { return d.stats("burst").Processes })
	if len(failed) > 0 {
		t.Fatalf("%d of 50 failed; first: %s", len(failed), failed[0])
	}
	if maxSeen > maxProcs || maxSeen < 2 {
		t.Fatalf("processes seen: %d; want 2..%d", maxSeen, maxProcs)
	}
}

func TestCrashMidRequestRecovers(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	d.deploy("crashy", "python3.11", map[string]string{"handler.py": testkit.SteerablePython}, api.FunctionFields{})
	if code, body := d.invoke("crashy", `{}`); code != http.StatusOK {
		t.Fatalf("warm-up: %d %s", code, body)
	}
	code, body := d.invoke("crashy", `{"crash": true}`)
	if code != http.StatusBadGateway {
		t.Fatalf("crashing request: want 502, got %d %s", code, body)
	}
	if code, body := d.invoke("crashy", `{"name":"again"}`); code != http.StatusOK || !strings.Contains(body, "again") {
		t.Fatalf("request after the crash: %d %s", code, body)
	}
	var invs []api.Invocation
	testkit.WaitFor(t, "3 recorded invocations", 5*time.Second, func() bool { // recorded after the answer
		invs = d.invocations("crashy")
		return len(invs) >= 3
	})
	if len(invs) != 3 || invs[1].HTTPStatus != http.StatusBadGateway || invs[1].Status != history.StatusFailed {
		t.Fatalf("history must show the crash as a failed invocation: %+v", invs)
	}
}

// TestRestartKeepsEverything stops the stack and starts a new one on the same data
// directory: functions, triggers and jobs are listed and the function answers.
func TestRestartKeepsEverything(t *testing.T) {
	t.Parallel()
	d, restart := startRestartable(t, "restart", devOptions{})
	ctx := context.Background()
	d.deploy("keeper", "python3.11", map[string]string{"handler.py": testkit.SteerablePython}, api.FunctionFields{EnvVars: &map[string]string{"A": "1"}})
	if _, err := d.client.CreateTrigger(ctx, d.ns, api.CreateTrigger{Name: "keeper-http", TriggerFields: api.TriggerFields{
		Type: ptr.To(api.TriggerHTTP), Function: ptr.To("keeper")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.CreateJob(ctx, d.ns, api.CreateJob{Name: "once", JobFields: api.JobFields{
		Function: ptr.To("keeper"), Event: ptr.To(json.RawMessage(`{"name":"job"}`)), RunID: ptr.To[int64](1)}}); err != nil {
		t.Fatal(err)
	}
	var job api.Job
	testkit.WaitFor(t, "the job to succeed", time.Minute, func() bool {
		job, _ = d.client.GetJob(ctx, d.ns, "once")
		return job.Status.Phase == api.JobSucceeded || job.Status.Phase == api.JobFailed
	})
	if job.Status.Phase != api.JobSucceeded || !strings.Contains(job.Status.Result, `"hello":"job"`) {
		t.Fatalf("job: %+v", job.Status)
	}
	if code, _ := d.invoke("keeper", `{}`); code != http.StatusOK {
		t.Fatalf("before restart: %d", code)
	}
	pids := d.stats("keeper").PIDs
	d.stop()
	for _, pid := range pids {
		if testkit.Alive(pid) {
			t.Fatalf("function process %d outlived the stop", pid)
		}
	}

	d2 := restart()
	fns, err := d2.client.ListFunctions(ctx, d2.ns)
	if err != nil || len(fns) != 1 || fns[0].Name != "keeper" || fns[0].EnvVars["A"] != "1" {
		t.Fatalf("functions after restart: %+v %v", fns, err)
	}
	fn := d2.waitSettled("keeper")
	if !fn.Status.Ready {
		t.Fatalf("after restart: %+v", fn.Status)
	}
	if code, body := d2.invoke("keeper", `{"name":"back"}`); code != http.StatusOK || !strings.Contains(body, "back") {
		t.Fatalf("invocation after restart: %d %s", code, body)
	}
	tr, err := d2.client.GetTrigger(ctx, d2.ns, "keeper-http")
	if err != nil || !tr.Status.Active {
		t.Fatalf("trigger after restart: %+v %v", tr, err)
	}
	job2, err := d2.client.GetJob(ctx, d2.ns, "once")
	if err != nil || job2.Status.Phase != api.JobSucceeded || job2.Status.ObservedRunID != 1 || job2.Status.Result != job.Status.Result {
		t.Fatalf("job after restart must keep its result and not run again: %+v %v", job2.Status, err)
	}
}

// brokerChannel opens a channel on the test broker; queue and its dead-letter queue are
// deleted when the test ends.
func brokerChannel(t *testing.T, queue string) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(testkit.AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer conn.Close()
		// A channel of its own: a failed passive declare may have closed the test's.
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
			_, _ = ch.QueueDelete(queue+".dlq", false, false, false)
		}
	})
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return conn, ch
}

// TestEventTrigger publishes 100 messages to a real RabbitMQ queue and expects 100
// successful event invocations, recorded in a real PostgreSQL and read through the API.
func TestEventTrigger(t *testing.T) {
	t.Parallel()
	pg, err := history.OpenPostgres(pgtest.NewDatabase(t, "devplane_events"), history.PostgresOptions{FlushInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close(context.Background()) })
	d := startDev(t, devOptions{amqpURL: testkit.AMQPURL(t), recorder: pg})
	ctx := context.Background()
	d.deploy("consumer", "python3.11", map[string]string{"handler.py": testkit.SteerablePython}, api.FunctionFields{})
	queue := d.ns + ".test-" + randomHex(t)
	if _, err := d.client.CreateTrigger(ctx, d.ns, api.CreateTrigger{Name: "from-queue", TriggerFields: api.TriggerFields{
		Type: ptr.To(api.TriggerEvent), Function: ptr.To("consumer"), Queue: &queue, BrokerSecret: ptr.To("unused-in-dev"), BrokerSecretKey: ptr.To("url")}}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the event trigger to be active", 30*time.Second, func() bool {
		tr, err := d.client.GetTrigger(ctx, d.ns, "from-queue")
		return err == nil && tr.Status.Active
	})
	conn, ch := brokerChannel(t, queue)
	testkit.WaitFor(t, "the consumer to declare the queue", 30*time.Second, func() bool {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			ch, _ = conn.Channel() // a failed passive declare closes the channel
			return false
		}
		return q.Consumers > 0
	})
	for i := range 100 {
		body := fmt.Sprintf(`{"name":"m%d"}`, i)
		if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{ContentType: "application/json", Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	var events int
	testkit.WaitFor(t, "100 event invocations in the history", 90*time.Second, func() bool {
		events = 0
		for _, inv := range d.invocations("consumer") {
			if inv.Kind == api.KindEvent && inv.Status == history.StatusSucceeded && inv.Trigger == "from-queue" {
				events++
			}
		}
		return events >= 100
	})
	if events != 100 {
		t.Fatalf("want exactly 100 event invocations, got %d", events)
	}
}

// deployCron deploys fn (the steerable Python handler, scale-down 1 s) and its per-minute cron
// trigger named trigger, with the other trigger fields of tf.
func (d *dev) deployCron(fn, trigger string, tf api.TriggerFields) {
	d.t.Helper()
	d.deploy(fn, "python3.11", map[string]string{"handler.py": testkit.SteerablePython}, api.FunctionFields{ScaleDownPeriodSec: ptr.To(int32(1))})
	tf.Type, tf.Function, tf.Schedule = ptr.To(api.TriggerCron), ptr.To(fn), ptr.To("* * * * *")
	if _, err := d.client.CreateTrigger(context.Background(), d.ns, api.CreateTrigger{Name: trigger, TriggerFields: tf}); err != nil {
		d.t.Fatal(err)
	}
}

// TestCronTriggerFires uses the API's finest schedule, every minute (the REST API is the
// cluster's: five fields, no seconds), so it may wait up to a minute; it runs in parallel.
func TestCronTriggerFires(t *testing.T) {
	testkit.NeedsHeavy(t, "a real minute tick (up to 75 s)")
	t.Parallel()
	d := startDev(t, devOptions{})
	ctx := context.Background()
	d.deployCron("ticker", "every-minute", api.TriggerFields{Timezone: ptr.To("Europe/Berlin")})
	var tr api.Trigger
	testkit.WaitFor(t, "a cron firing", 75*time.Second, func() bool {
		tr, _ = d.client.GetTrigger(ctx, d.ns, "every-minute")
		return tr.Status.LastFireTime != nil
	})
	if tick := *tr.Status.LastFireTime; tick.Second() != 0 || tick.Nanosecond() != 0 {
		t.Fatalf("cron must fire at exact minute ticks, last fire %s", tick)
	}
	var invs []api.Invocation
	testkit.WaitFor(t, "the cron invocation in the history", 10*time.Second, func() bool {
		invs = d.invocations("ticker")
		return len(invs) > 0
	})
	if invs[0].Kind != api.KindCron || invs[0].Status != history.StatusSucceeded || invs[0].Trigger != "every-minute" {
		t.Fatalf("cron invocation: %+v", invs[0])
	}
	if !invs[0].ColdStart {
		t.Errorf("the tick of a function at zero without pre-warm must be a cold start: %+v", invs[0])
	}
}

// TestCronPrewarm: with prewarm_seconds the function is up when the tick comes (no cold
// start in its record), then scales back to zero after the tick like after any call.
func TestCronPrewarm(t *testing.T) {
	testkit.NeedsHeavy(t, "real minute ticks (up to 140 s)")
	t.Parallel()
	d := startDev(t, devOptions{})
	d.deployCron("warmed", "warm-tick", api.TriggerFields{PrewarmSeconds: ptr.To(int32(30))})
	created := time.Now()
	// A tick too close to the trigger's creation had no full window: judge the first one
	// at least 10 s after it.
	var tick api.Invocation
	testkit.WaitFor(t, "a tick with a full pre-warm window", 140*time.Second, func() bool {
		for _, inv := range d.invocations("warmed") {
			if inv.Kind == api.KindCron && inv.Start.After(created.Add(10*time.Second)) {
				tick = inv
				return true
			}
		}
		return false
	})
	if tick.ColdStart || tick.Status != history.StatusSucceeded {
		t.Fatalf("the pre-warmed tick: %+v", tick)
	}
	for _, inv := range d.invocations("warmed") {
		if inv.Kind != api.KindCron {
			t.Errorf("the pre-warm reached the handler: %+v", inv)
		}
	}
	// The window ends 15 s after the tick and the next begins 30 s before the next tick:
	// in between the function scales down.
	testkit.WaitFor(t, "scaled back to zero after the tick", 30*time.Second, func() bool { return d.stats("warmed").Processes == 0 })
}

// TestBadInputsDisturbNothing: a broken zip, an unknown runtime and a Go syntax error are 4xx
// at upload; a Go type error is a Failed build with the compiler's message; a Python syntax error fails the cold start
// with the interpreter's message; a healthy function keeps answering throughout.
func TestBadInputsDisturbNothing(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	ctx := context.Background()
	d.deploy("healthy", "python3.11", map[string]string{"handler.py": testkit.SteerablePython}, api.FunctionFields{})
	healthy := func(stage string) {
		t.Helper()
		if code, body := d.invoke("healthy", `{}`); code != http.StatusOK {
			t.Fatalf("healthy function after %s: %d %s", stage, code, body)
		}
	}
	healthy("start")

	if _, err := d.client.CreateFunction(ctx, d.ns, api.CreateFunction{Name: "cobol", FunctionFields: api.FunctionFields{Runtime: ptr.To("cobol85")}}); !isStatus(err, http.StatusBadRequest) {
		t.Fatalf("unknown runtime: want 400, got %v", err)
	}
	// One node is on PATH, so one of the Node.js runtimes is missing here: refused at create,
	// naming what to install, while the other is accepted.
	for _, rt := range []string{"nodejs20", "nodejs22"} {
		_, missing := buildkit.Interpreter(buildkit.Runtimes[rt])
		_, err := d.client.CreateFunction(ctx, d.ns, api.CreateFunction{Name: "on-" + rt, FunctionFields: api.FunctionFields{Runtime: ptr.To(rt)}})
		if missing != nil && (!isStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "needs Node.js") || !strings.Contains(err.Error(), "field runtime")) {
			t.Fatalf("%s without its Node.js: want 400 naming it, got %v", rt, err)
		}
		if missing == nil && err != nil {
			t.Fatalf("%s with its Node.js: %v", rt, err)
		}
	}
	nul := map[string]string{"TOKEN": "a\x00b"}
	if _, err := d.client.CreateFunction(ctx, d.ns, api.CreateFunction{Name: "nul-env", FunctionFields: api.FunctionFields{Runtime: ptr.To("python3.11"), EnvVars: &nul}}); !isStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "NUL") {
		t.Fatalf("NUL in an env value: want 400 naming it, got %v", err)
	}
	huge := map[string]string{"BLOB": strings.Repeat("x", 40<<10)}
	if _, err := d.client.UpdateFunction(ctx, d.ns, "healthy", api.FunctionFields{EnvVars: &huge}); !isStatus(err, http.StatusBadRequest) {
		t.Fatalf("a 40 KiB env value: want 400, got %v", err)
	}
	if _, err := d.client.CreateFunction(ctx, d.ns, api.CreateFunction{Name: "broken", FunctionFields: api.FunctionFields{Runtime: ptr.To("python3.11")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.UploadSource(ctx, d.ns, "broken", bytes.NewReader([]byte("PK\x03\x04 this is not a zip"))); !isStatus(err, http.StatusBadRequest) {
		t.Fatalf("broken zip: want 400, got %v", err)
	}
	healthy("bad uploads")

	goSyntax := "package handler\n\nfunc Handle(event map[string]interface{}) interface{} {\n\treturn event[\n}\n"
	if _, err := d.client.CreateFunction(ctx, d.ns, api.CreateFunction{Name: "go-syntax", FunctionFields: api.FunctionFields{Runtime: ptr.To("go1.25")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.UploadSource(ctx, d.ns, "go-syntax", bytes.NewReader(testkit.Zip(t, map[string]string{"handler.go": goSyntax}))); !isStatus(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "handler.go:5") {
		t.Fatalf("Go syntax error: want 400 naming the line, got %v", err)
	}
	goType := "package handler\n\nfunc Handle(event map[string]interface{}) interface{} {\n\treturn notDefinedAnywhere\n}\n"
	fn := d.deploy("go-compile", "go1.25", map[string]string{"handler.go": goType}, api.FunctionFields{})
	if fn.Status.Phase != api.PhaseFailed || !strings.Contains(fn.Status.LastBuildError, "undefined: notDefinedAnywhere") {
		t.Fatalf("Go compile error: want Failed with the compiler's message, got %+v", fn.Status)
	}
	if code, _ := d.invoke("go-compile", `{}`); code != http.StatusServiceUnavailable {
		t.Fatalf("a function that never built: want 503, got %d", code)
	}
	// Python is compiled at build time too: a syntax error is a Failed build with the message.
	fn = d.deploy("py-syntax", "python3.11", map[string]string{"handler.py": "def handle(event):\n    return {\n"}, api.FunctionFields{})
	if fn.Status.Phase != api.PhaseFailed || !strings.Contains(fn.Status.LastBuildError, "SyntaxError") {
		t.Fatalf("Python syntax error: want Failed with the compiler's message, got %+v", fn.Status)
	}
	if code, _ := d.invoke("py-syntax", `{}`); code != http.StatusServiceUnavailable {
		t.Fatalf("a Python function that never built: want 503, got %d", code)
	}
	healthy("broken functions")
}

func isStatus(err error, code int) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.StatusCode == code
}

// TestDisabledHTTPTriggerAndTimeout: enabled:false on the only http trigger answers 503 and
// stops the processes in place; enabling it serves again. A timeout is enforced (504).
func TestDisabledHTTPTriggerAndTimeout(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	ctx := context.Background()
	d.deploy("gated", "python3.11", map[string]string{"handler.py": testkit.SteerablePython},
		api.FunctionFields{MinReplicas: ptr.To[int32](1), TimeoutSec: ptr.To[int32](1)})
	if _, err := d.client.CreateTrigger(ctx, d.ns, api.CreateTrigger{Name: "gated-http", TriggerFields: api.TriggerFields{
		Type: ptr.To(api.TriggerHTTP), Function: ptr.To("gated")}}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the warm process (min_replicas 1)", 30*time.Second, func() bool { return d.stats("gated").Ready == 1 })
	if code, body := d.invoke("gated", `{"sleep": 3}`); code != http.StatusGatewayTimeout {
		t.Fatalf("timeout_sec 1 and a 3 s handler: want 504, got %d %s", code, body)
	}
	pid := d.stats("gated").PIDs[0]
	if _, err := d.client.SetTriggerEnabled(ctx, d.ns, "gated-http", false); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the trigger to report inactive", 10*time.Second, func() bool {
		tr, err := d.client.GetTrigger(ctx, d.ns, "gated-http")
		return err == nil && !tr.Status.Active && strings.Contains(tr.Status.Message, "enabled is false")
	})
	testkit.WaitFor(t, "the processes to stop", 10*time.Second, func() bool { return d.stats("gated").Processes == 0 && !testkit.Alive(pid) })
	if code, _ := d.invoke("gated", `{}`); code != http.StatusServiceUnavailable {
		t.Fatalf("disabled: want 503, got %d", code)
	}
	if _, err := d.client.SetTriggerEnabled(ctx, d.ns, "gated-http", true); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the function to serve again", 30*time.Second, func() bool {
		code, _ := d.invoke("gated", `{}`)
		return code == http.StatusOK
	})
}

// TestEventTriggerWithoutBroker: without --amqp-url an event trigger is accepted but
// inactive, and its status says how to turn it on.
func TestEventTriggerWithoutBroker(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	ctx := context.Background()
	d.deploy("quiet", "python3.11", map[string]string{"handler.py": testkit.SteerablePython}, api.FunctionFields{})
	if _, err := d.client.CreateTrigger(ctx, d.ns, api.CreateTrigger{Name: "q", TriggerFields: api.TriggerFields{
		Type: ptr.To(api.TriggerEvent), Function: ptr.To("quiet"), Queue: ptr.To(d.ns + ".nowhere"), BrokerSecret: ptr.To("s"), BrokerSecretKey: ptr.To("url")}}); err != nil {
		t.Fatal(err)
	}
	var tr api.Trigger
	testkit.WaitFor(t, "the trigger status", 10*time.Second, func() bool {
		tr, _ = d.client.GetTrigger(ctx, d.ns, "q")
		return strings.Contains(tr.Status.Message, "--amqp-url")
	})
	if tr.Status.Active {
		t.Fatalf("an event trigger without a broker must be inactive: %+v", tr.Status)
	}
}

// TestTriggerSources: every answer of the trigger routes carries its kind's status.source —
// the table the cluster's tests run too.
func TestTriggerSources(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	backendtest.RunTriggerSources(t, d.client, d.ns, "f")
}

// TestRestartInterruptsRunningJob: a job running when sless dev stops is Failed, not re-run,
// after the restart (at most once per run_id); raising run_id runs it again.
func TestRestartInterruptsRunningJob(t *testing.T) {
	t.Parallel()
	d, restart := startRestartable(t, "jobs", devOptions{})
	ctx := context.Background()
	d.deploy("slow", "python3.11", map[string]string{"handler.py": testkit.SteerablePython}, api.FunctionFields{})
	if _, err := d.client.CreateJob(ctx, d.ns, api.CreateJob{Name: "long", JobFields: api.JobFields{
		Function: ptr.To("slow"), Event: ptr.To(json.RawMessage(`{"sleep": 30}`)), RunID: ptr.To[int64](1)}}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the job to run", 30*time.Second, func() bool {
		j, _ := d.client.GetJob(ctx, d.ns, "long")
		return j.Status.Phase == api.JobRunning
	})
	d.stop()
	d2 := restart()
	j, err := d2.client.GetJob(ctx, d2.ns, "long")
	if err != nil || j.Status.Phase != api.JobFailed || !strings.Contains(j.Status.Error, "raise run_id") {
		t.Fatalf("interrupted job after restart: %+v %v", j.Status, err)
	}
	if _, err := d2.client.UpdateJob(ctx, d2.ns, "long", api.JobFields{Event: ptr.To(json.RawMessage(`{"name":"rerun"}`)), RunID: ptr.To[int64](2)}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the re-run to succeed", time.Minute, func() bool {
		j, _ = d2.client.GetJob(ctx, d2.ns, "long")
		return j.Status.ObservedRunID == 2 && j.Status.Phase == api.JobSucceeded
	})
	if !strings.Contains(j.Status.Result, "rerun") {
		t.Fatalf("re-run result: %+v", j.Status)
	}
	invs := d2.invocations("slow")
	if len(invs) == 0 || invs[0].Kind != api.KindJob || invs[0].Trigger != "long" {
		t.Fatalf("the job run must be in the history: %+v", invs)
	}
}

// TestSelfContainedJob runs a job with its own uploaded code (stored the way the gateway's
// job upload stores it): built like a function, run once, result recorded.
func TestSelfContainedJob(t *testing.T) {
	t.Parallel()
	d := startDev(t, devOptions{})
	ctx := context.Background()
	zipData := testkit.Zip(t, map[string]string{"handler.py": "def handle(event):\n    return {'sum': event['a'] + event['b']}\n"})
	src, err := buildkit.ValidateBytes(ctx, zipData, "python3.11", "", buildkit.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	bc, err := buildkit.NewBuildContext(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	up, err := d.arts.SaveUpload(ctx, d.ns, "adder", time.Now(), zipData, bc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.backend.Jobs().Create(ctx, d.ns, "adder", api.JobSpec{Runtime: "python3.11", RunID: 1, Event: json.RawMessage(`{"a": 2, "b": 3}`),
		Source: &api.Source{ContextKey: up.ContextKey, ArchiveKey: up.ZipKey, SHA256: up.Hash}})
	if err != nil {
		t.Fatal(err)
	}
	var j api.Job
	testkit.WaitFor(t, "the self-contained job", time.Minute, func() bool {
		j, _ = d.client.GetJob(ctx, d.ns, "adder")
		return j.Status.Phase == api.JobSucceeded || j.Status.Phase == api.JobFailed
	})
	if j.Status.Phase != api.JobSucceeded || j.Status.Result != `{"sum":5}` || j.Status.DurationMs <= 0 {
		t.Fatalf("self-contained job: %+v", j.Status)
	}
	if invs := d.invocations("adder"); len(invs) != 1 || invs[0].Kind != api.KindJob {
		t.Fatalf("job history: %+v", invs)
	}
}

func TestDataDirIsExclusive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d := startDev(t, devOptions{dataDir: dir})
	store, err := buildkit.NewFSStore(filepath.Join(dir, "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = devplane.New(devplane.Options{DataDir: dir, Artifacts: buildkit.Artifacts{Store: store}})
	if err == nil || !strings.Contains(err.Error(), "in use by another sless dev") {
		t.Fatalf("a second backend on the same data directory: want a clear error, got %v", err)
	}
	d.stop()
	b, err := devplane.New(devplane.Options{DataDir: dir, Artifacts: buildkit.Artifacts{Store: store}})
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	b.Close()
}
