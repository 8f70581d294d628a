package devplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	"sless.dev/sless/test/testkit"
)

// secretReader answers what it was given: the variable, the files of its secret and their
// mode, and prints the variable (which the logs must mask).
const secretReader = `import os, stat

def handle(event):
    out = {"env": os.environ.get("DB_PASSWORD")}
    d = "/var/sless/secrets/db"
    if os.path.isdir(d):
        out["files"] = {n: open(os.path.join(d, n)).read() for n in sorted(os.listdir(d))}
        out["mode"] = oct(stat.S_IMODE(os.stat(os.path.join(d, "password")).st_mode))
    print("connecting with", out["env"], flush=True)
    return out
`

type readerAnswer struct {
	Env   string            `json:"env"`
	Files map[string]string `json:"files"`
	Mode  string            `json:"mode"`
}

func (d *dev) readSecrets(name string) readerAnswer {
	d.t.Helper()
	code, body := d.invoke(name, "{}")
	if code != 200 {
		d.t.Fatalf("invoke %s: %d %s", name, code, body)
	}
	var a readerAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		d.t.Fatalf("invoke %s: %s", name, body)
	}
	return a
}

// TestSecretsReachOnlyTheFunction: a function reads its secret from env and from a file
// (mode 0400); no value is in any API answer or any file of the data directory; a rotation
// restarts it with the new value; a missing key is a not-Ready message naming it.
func TestSecretsReachOnlyTheFunction(t *testing.T) {
	spans := recordSpans()
	d := startDev(t, devOptions{})
	sandboxed := d.backend.Pool().Isolation().Sandboxed
	ctx := context.Background()
	const marker, rotated = "marker-5e1c-first", "marker-93aa-second"
	if _, err := d.client.CreateSecret(ctx, d.ns, api.CreateSecret{Name: "db", SecretFields: api.SecretFields{Data: map[string]string{"password": marker, "user": "app"}}}); err != nil {
		t.Fatal(err)
	}
	fields := api.FunctionFields{SecretEnv: &[]api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}}}
	if sandboxed {
		fields.SecretFiles = &[]api.SecretFile{{Secret: "db"}}
	}
	fn := d.deploy("reader", "python3.11", map[string]string{"handler.py": secretReader}, fields)
	if !fn.Status.Ready {
		t.Fatalf("reader not Ready: %+v", fn.Status)
	}
	a := d.readSecrets("reader")
	if a.Env != marker {
		t.Errorf("env DB_PASSWORD = %q, want the secret's value", a.Env)
	}
	if sandboxed && (a.Files["password"] != marker || a.Files["user"] != "app" || a.Mode != "0o400") {
		t.Errorf("files %v mode %s, want both keys as files of mode 0400", a.Files, a.Mode)
	} else if !sandboxed {
		t.Log("no sandbox here: secret_files not checked")
	}

	// The logs show what it printed with the value masked.
	testkit.WaitFor(t, "the printed line in the logs", 30*time.Second, func() bool {
		_, lines := d.logs("/functions/reader/logs", d.token)
		return len(withText(lines, "connecting with "+rules.SecretMask)) > 0
	})
	// A job of the function: its result and output are masked too.
	if _, err := d.client.CreateJob(ctx, d.ns, api.CreateJob{Name: "once", JobFields: api.JobFields{Function: ptr.To("reader"), RunID: ptr.To(int64(1))}}); err != nil {
		t.Fatal(err)
	}
	var job api.Job
	testkit.WaitFor(t, "the job to finish", time.Minute, func() bool {
		job = must(d.client.GetJob(ctx, d.ns, "once"))
		return job.Status.Phase == api.JobSucceeded || job.Status.Phase == api.JobFailed
	})
	if job.Status.Phase != api.JobSucceeded || !strings.Contains(job.Status.Result, rules.SecretMask) || !strings.Contains(job.Status.Output, rules.SecretMask) {
		t.Errorf("job status %+v: want its result and output masked", job.Status)
	}

	// What an API reader sees: names, keys and versions only.
	var answers bytes.Buffer
	_, lines := d.logs("/functions/reader/logs", d.token)
	_, jobLines := d.logs("/jobs/once/logs", d.token)
	for _, v := range []any{must(d.client.GetSecret(ctx, d.ns, "db")), must(d.client.ListSecrets(ctx, d.ns)), must(d.client.GetFunction(ctx, d.ns, "reader")),
		must(d.client.GetJob(ctx, d.ns, "once")), lines, jobLines, d.invocations("reader")} {
		_ = json.NewEncoder(&answers).Encode(v)
	}
	if strings.Contains(answers.String(), "marker-") {
		t.Errorf("an API answer holds a value: %s", answers.String())
	}
	// What a reader of the traces sees: the spans of the calls above, none with a value.
	if len(spans.Ended()) == 0 {
		t.Error("no span recorded")
	}
	for _, sp := range spans.Ended() {
		if text := spanText(sp); strings.Contains(text, "marker-") {
			t.Errorf("span %s holds a value: %s", sp.Name(), text)
		}
	}

	// Rotation: the function restarts with the new value.
	s, err := d.client.UpdateSecret(ctx, d.ns, "db", api.SecretFields{Data: map[string]string{"password": rotated, "user": "app"}})
	if err != nil || s.Version != 2 {
		t.Fatalf("rotate: %+v %v", s, err)
	}
	testkit.WaitFor(t, "the rotated value to reach the function", time.Minute, func() bool { return d.readSecrets("reader").Env == rotated })
	if a := d.readSecrets("reader"); sandboxed && a.Files["password"] != rotated {
		t.Errorf("file after rotation = %q", a.Files["password"])
	}

	// The data directory (state, logs, the sealed secrets) holds no value in the clear.
	d.stop()
	err = filepath.WalkDir(d.dataDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		if err == nil && (bytes.Contains(data, []byte(marker)) || bytes.Contains(data, []byte(rotated))) {
			t.Errorf("%s holds a secret value", path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(d.dataDir, "secrets.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("secrets.key: %v %v, want mode 0600", fi, err)
	}
}

var (
	spanRecorder     = tracetest.NewSpanRecorder()
	spanRecorderOnce sync.Once
)

// recordSpans records the spans of this test process from now on. Set once for the process:
// a package's tracer (otel.Tracer at init) keeps delegating to the first provider set.
func recordSpans() *tracetest.SpanRecorder {
	spanRecorderOnce.Do(func() {
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spanRecorder)))
	})
	return spanRecorder
}

// spanText is everything a span says: name, status, attributes and events.
func spanText(sp sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	b.WriteString(sp.Name() + " " + sp.Status().Description)
	for _, a := range sp.Attributes() {
		b.WriteString(" " + string(a.Key) + "=" + a.Value.String())
	}
	for _, e := range sp.Events() {
		b.WriteString(" " + e.Name)
		for _, a := range e.Attributes {
			b.WriteString(" " + string(a.Key) + "=" + a.Value.String())
		}
	}
	return b.String()
}

// TestSecretsSurviveARestart: the sealed secrets load again with the data directory's key.
func TestSecretsSurviveARestart(t *testing.T) {
	d, restart := startRestartable(t, "secrets", devOptions{})
	ctx := context.Background()
	if _, err := d.client.CreateSecret(ctx, d.ns, api.CreateSecret{Name: "api", SecretFields: api.SecretFields{DataBase64: map[string]string{"token": "AAEC"}}}); err != nil {
		t.Fatal(err)
	}
	d.stop()
	d = restart()
	s, err := d.client.GetSecret(ctx, d.ns, "api")
	if err != nil || s.Version != 1 || len(s.Keys) != 1 || s.Keys[0] != "token" {
		t.Fatalf("after a restart: %+v %v", s, err)
	}
}

// TestMissingSecretIsNotReady: a reference to a secret or key that does not exist is a
// status naming it, and the function becomes Ready once the secret is there.
func TestMissingSecretIsNotReady(t *testing.T) {
	d := startDev(t, devOptions{})
	ctx := context.Background()
	fn := d.deploy("needs", "python3.11", map[string]string{"handler.py": secretReader},
		api.FunctionFields{SecretEnv: &[]api.SecretEnv{{Name: "DB_PASSWORD", Secret: "db", Key: "password"}}})
	if fn.Status.Ready || !strings.Contains(fn.Status.Message, `secret "db" does not exist`) {
		t.Fatalf("status %+v, want not Ready naming the secret", fn.Status)
	}
	if _, err := d.client.CreateSecret(ctx, d.ns, api.CreateSecret{Name: "db", SecretFields: api.SecretFields{Data: map[string]string{"user": "x"}}}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "a message naming the missing key", time.Minute, func() bool {
		fn = must(d.client.GetFunction(ctx, d.ns, "needs"))
		return strings.Contains(fn.Status.Message, `has no key "password"`)
	})
	if _, err := d.client.UpdateSecret(ctx, d.ns, "db", api.SecretFields{Data: map[string]string{"password": "p"}}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "Ready once the key exists", time.Minute, func() bool {
		return must(d.client.GetFunction(ctx, d.ns, "needs")).Status.Ready
	})
	if a := d.readSecrets("needs"); a.Env != "p" {
		t.Errorf("env = %q", a.Env)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestEventTriggerBrokerFromSecret: an event trigger's broker URL comes from the tenant's
// secret broker_secret (key broker_secret_key) when there is one, as KEDA reads it in a
// cluster; a missing key makes it inactive with a message naming it.
func TestEventTriggerBrokerFromSecret(t *testing.T) {
	url := testkit.AMQPURL(t)
	d := startDev(t, devOptions{}) // no broker of sless dev's own
	ctx := context.Background()
	d.deploy("consumer", "python3.11", map[string]string{"handler.py": testkit.SteerablePython}, api.FunctionFields{})
	if _, err := d.client.CreateSecret(ctx, d.ns, api.CreateSecret{Name: "broker", SecretFields: api.SecretFields{Data: map[string]string{"url": url}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.CreateTrigger(ctx, d.ns, api.CreateTrigger{Name: "orders", TriggerFields: api.TriggerFields{
		Type: ptr.To(api.TriggerEvent), Function: ptr.To("consumer"), Queue: ptr.To(d.ns + ".orders-" + randomHex(t)), BrokerSecret: ptr.To("broker"), BrokerSecretKey: ptr.To("url")}}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the trigger active on the secret's broker", 30*time.Second, func() bool {
		return must(d.client.GetTrigger(ctx, d.ns, "orders")).Status.Active
	})
	if _, err := d.client.UpdateSecret(ctx, d.ns, "broker", api.SecretFields{Data: map[string]string{"host": url}}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "inactive, naming the missing key", 30*time.Second, func() bool {
		tr := must(d.client.GetTrigger(ctx, d.ns, "orders"))
		return !tr.Status.Active && strings.Contains(tr.Status.Message, `has no key "url"`)
	})
	if tr := must(d.client.GetTrigger(ctx, d.ns, "orders")); strings.Contains(tr.Status.Message, url) {
		t.Errorf("the trigger's status shows the broker URL: %s", tr.Status.Message)
	}
}
