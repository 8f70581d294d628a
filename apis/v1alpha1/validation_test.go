package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

const ns = "default"

var validSource = &v1.SourceRef{
	ContextKey: "contexts/default/f/1.tar.gz",
	SHA256:     strings.Repeat("ab", 32),
}

func fn(name string, mut func(*v1.Function)) *v1.Function {
	f := &v1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1.FunctionSpec{CodeSpec: v1.CodeSpec{Runtime: v1.RuntimePython311, Source: validSource}},
	}
	return with(f, mut)
}

func trigger(name string, mut func(*v1.Trigger)) *v1.Trigger {
	t := &v1.Trigger{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1.TriggerSpec{Type: v1.TriggerHTTP, FunctionRef: v1.LocalObjectReference{Name: "f"}},
	}
	return with(t, mut)
}

func job(name string, mut func(*v1.FunctionJob)) *v1.FunctionJob {
	j := &v1.FunctionJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1.FunctionJobSpec{FunctionRef: &v1.LocalObjectReference{Name: "f"}},
	}
	return with(j, mut)
}

// TestInvalidObjectsAreRejected proves the CRD schemas refuse bad input with a field error
// that names the offending field, so API users learn what to fix.
func TestInvalidObjectsAreRejected(t *testing.T) {
	testenv.Need(t)
	cases := []struct {
		name      string
		obj       client.Object
		wantField string // a field path the error must name, or for object-level rules its message
	}{
		{"function name not DNS-1123", fn("Bad_Name", nil), "name must be a DNS-1123 label"},
		{"function name too long", fn(strings.Repeat("a", 64), nil), "name must be a DNS-1123 label"},
		{"unknown runtime", fn("f1", func(f *v1.Function) { f.Spec.Runtime = "cobol85" }), "spec.runtime"},
		{"missing runtime", fn("f2", func(f *v1.Function) { f.Spec.Runtime = "" }), "spec.runtime"},
		{"timeout 901", fn("f3", func(f *v1.Function) { f.Spec.TimeoutSeconds = 901 }), "spec.timeoutSeconds"},
		{"negative timeout", fn("f4", func(f *v1.Function) { f.Spec.TimeoutSeconds = -1 }), "spec.timeoutSeconds"},
		{"memory too small", fn("f5", func(f *v1.Function) { f.Spec.MemoryMB = 8 }), "spec.memoryMB"},
		{"max below min", fn("f6", func(f *v1.Function) { f.Spec.Scale = v1.ScaleSpec{MinReplicas: 3, MaxReplicas: 2} }), "spec.scale.maxReplicas"},
		{"bad scaling metric", fn("f7", func(f *v1.Function) { f.Spec.Scale.Metric = "cpu" }), "spec.scale.metric"},
		{"reserved env name", fn("f8", func(f *v1.Function) { f.Spec.Env = map[string]string{"SLESS_MODE": "x"} }), "spec.env"},
		{"invalid env name", fn("f9", func(f *v1.Function) { f.Spec.Env = map[string]string{"1A": "x"} }), "spec.env"},
		{"bad source hash", fn("f10", func(f *v1.Function) {
			f.Spec.Source = &v1.SourceRef{ContextKey: "k", SHA256: "nothex"}
		}), "spec.source.sha256"},
		{"cron trigger without cron", trigger("t1", func(t *v1.Trigger) { t.Spec.Type = v1.TriggerCron }), "spec.cron"},
		{"cron trigger with empty schedule", trigger("t2", func(t *v1.Trigger) {
			t.Spec.Type, t.Spec.Cron = v1.TriggerCron, &v1.CronSpec{}
		}), "spec.cron.schedule"},
		{"cron schedule with three fields", trigger("t3", func(t *v1.Trigger) {
			t.Spec.Type, t.Spec.Cron = v1.TriggerCron, &v1.CronSpec{Schedule: "* * *"}
		}), "spec.cron.schedule"},
		{"event trigger without event", trigger("t4", func(t *v1.Trigger) { t.Spec.Type = v1.TriggerEvent }), "spec.event"},
		{"event trigger with empty queue", trigger("t5", func(t *v1.Trigger) {
			t.Spec.Type, t.Spec.Event = v1.TriggerEvent, &v1.EventSpec{BrokerSecretRef: v1.SecretKeyReference{Name: "amqp"}}
		}), "spec.event.queue"},
		{"http trigger with a schedule", trigger("t6", func(t *v1.Trigger) { t.Spec.Cron = &v1.CronSpec{Schedule: "* * * * *"} }), "spec.cron"},
		{"unknown trigger type", trigger("t7", func(t *v1.Trigger) { t.Spec.Type = "webhook" }), "spec.type"},
		{"requireAuth on cron", trigger("t8", func(t *v1.Trigger) {
			t.Spec.Type, t.Spec.Cron, t.Spec.RequireAuth = v1.TriggerCron, &v1.CronSpec{Schedule: "@hourly"}, true
		}), "spec.requireAuth"},
		{"trigger without function", trigger("t9", func(t *v1.Trigger) { t.Spec.FunctionRef.Name = "" }), "spec.functionRef.name"},
		{"job with neither ref nor runtime", job("j1", func(j *v1.FunctionJob) { j.Spec.FunctionRef = nil }), "spec"},
		{"job with ref and runtime", job("j2", func(j *v1.FunctionJob) { j.Spec.Runtime = v1.RuntimeNode20 }), "spec"},
		{"job with ref and source", job("j3", func(j *v1.FunctionJob) { j.Spec.Source = validSource }), "spec"},
		{"negative runID", job("j4", func(j *v1.FunctionJob) { j.Spec.RunID = -1 }), "spec.runID"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := env.Client.Create(context.Background(), tc.obj)
			if err == nil {
				_ = env.Client.Delete(context.Background(), tc.obj)
				t.Fatalf("created an invalid object; want a 422 naming %s", tc.wantField)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			var fields []string
			for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
				fields = append(fields, c.Field)
			}
			for _, f := range fields {
				if f == tc.wantField {
					return
				}
			}
			if strings.Contains(err.Error(), tc.wantField) {
				return
			}
			t.Fatalf("want a cause on field %q, got fields %q: %v", tc.wantField, fields, err)
		})
	}
}

// TestValidObjectsRoundTripWithDefaults proves valid objects are accepted and the documented
// defaults are filled in by the API server, not by each client.
func TestValidObjectsRoundTripWithDefaults(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	c := env.Client

	f := fn("defaults", nil)
	if err := c.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	var gotF v1.Function
	if err := c.Get(ctx, client.ObjectKeyFromObject(f), &gotF); err != nil {
		t.Fatal(err)
	}
	wantScale := v1.ScaleSpec{MinReplicas: 0, MaxReplicas: 10, ScaleDownPeriodSeconds: 300, Metric: v1.ScaleOnConcurrency, Target: 100}
	if gotF.Spec.Scale != wantScale {
		t.Errorf("scale defaults = %+v, want %+v", gotF.Spec.Scale, wantScale)
	}
	if gotF.Spec.MemoryMB != 128 || gotF.Spec.TimeoutSeconds != 0 {
		t.Errorf("memoryMB=%d timeoutSeconds=%d, want 128 and 0 (no limit)", gotF.Spec.MemoryMB, gotF.Spec.TimeoutSeconds)
	}

	tr := trigger("cron-defaults", func(t *v1.Trigger) {
		t.Spec.Type, t.Spec.Cron = v1.TriggerCron, &v1.CronSpec{Schedule: "*/5 * * * *", Timezone: "Europe/Berlin"}
	})
	if err := c.Create(ctx, tr); err != nil {
		t.Fatal(err)
	}
	var gotT v1.Trigger
	if err := c.Get(ctx, client.ObjectKeyFromObject(tr), &gotT); err != nil {
		t.Fatal(err)
	}
	if !gotT.Spec.IsEnabled() || gotT.Spec.Enabled == nil {
		t.Errorf("enabled default: got %v, want explicit true", gotT.Spec.Enabled)
	}
	if gotT.Spec.Cron.ConcurrencyPolicy != "Forbid" || gotT.Spec.Cron.StartingDeadlineSeconds != 60 {
		t.Errorf("cron defaults = %+v", *gotT.Spec.Cron)
	}

	ev := trigger("event-defaults", func(t *v1.Trigger) {
		t.Spec.Type = v1.TriggerEvent
		t.Spec.Event = &v1.EventSpec{Queue: "orders", BrokerSecretRef: v1.SecretKeyReference{Name: "amqp"}}
	})
	if err := c.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}
	var gotE v1.Trigger
	if err := c.Get(ctx, client.ObjectKeyFromObject(ev), &gotE); err != nil {
		t.Fatal(err)
	}
	e := gotE.Spec.Event
	if e.Retry.MaxAttempts != 3 || e.Retry.BackoffMillis != 1000 || e.QueueLength != 5 || e.MaxJobs != 10 || e.BrokerSecretRef.Key != "host" {
		t.Errorf("event defaults = %+v", *e)
	}

	// Type is immutable: flipping it would orphan the rendered workloads.
	gotE.Spec.Type, gotE.Spec.Event = v1.TriggerHTTP, nil
	if err := c.Update(ctx, &gotE); !apierrors.IsInvalid(err) {
		t.Errorf("changing trigger type: want Invalid, got %v", err)
	}

	j := job("self-contained", func(j *v1.FunctionJob) {
		j.Spec.FunctionRef = nil
		j.Spec.Runtime, j.Spec.Source = v1.RuntimeGo123, validSource
		j.Spec.Event = &apiextensionsv1.JSON{Raw: []byte(`{"n":[1,2,3],"s":"x"}`)}
		j.Spec.RunID = 2
	})
	if err := c.Create(ctx, j); err != nil {
		t.Fatal(err)
	}
	var gotJ v1.FunctionJob
	if err := c.Get(ctx, client.ObjectKeyFromObject(j), &gotJ); err != nil {
		t.Fatal(err)
	}
	if string(gotJ.Spec.Event.Raw) != `{"n":[1,2,3],"s":"x"}` || gotJ.Spec.RunID != 2 {
		t.Errorf("event/runID did not round-trip: %s %d", gotJ.Spec.Event.Raw, gotJ.Spec.RunID)
	}
	// A non-object event (a bare string) is a valid JSON event too.
	j2 := job("string-event", func(j *v1.FunctionJob) { j.Spec.Event = &apiextensionsv1.JSON{Raw: []byte(`"hello"`)} })
	if err := c.Create(ctx, j2); err != nil {
		t.Fatal(err)
	}
}

// with applies mut, if any, to o.
func with[T any](o *T, mut func(*T)) *T {
	if mut != nil {
		mut(o)
	}
	return o
}
