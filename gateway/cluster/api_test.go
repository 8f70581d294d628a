package cluster_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend/backendtest"
	"sless.dev/sless/gateway/client"
)

func TestFunctionCRUD(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tn := h.tenant()
	ctx := context.Background()

	fn, err := tn.c.CreateFunction(ctx, tn.ns, api.CreateFunction{Name: "hello", FunctionFields: api.FunctionFields{
		Runtime: ptr.To("python3.11"), TimeoutSec: ptr.To(int32(30)), EnvVars: &map[string]string{"B": "2", "A": "1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if fn.Runtime != "python3.11" || fn.TimeoutSec != 30 || fn.MemoryMB != 128 || fn.MaxReplicas != 10 || fn.EnvVars["A"] != "1" {
		t.Fatalf("created function = %+v, want runtime, timeout and env as sent and defaults for the rest", fn.FunctionSpec)
	}

	// An update sends only memory: every other field keeps its value.
	fn, err = tn.c.UpdateFunction(ctx, tn.ns, "hello", api.FunctionFields{MemoryMB: ptr.To(int32(256))})
	if err != nil {
		t.Fatal(err)
	}
	if fn.MemoryMB != 256 || fn.TimeoutSec != 30 || fn.Runtime != "python3.11" || len(fn.EnvVars) != 2 {
		t.Fatalf("after a memory-only update: %+v, want only memory_mb changed", fn.FunctionSpec)
	}
	// timeout_sec 0 (no limit) is a value, not "unset".
	if fn, err = tn.c.UpdateFunction(ctx, tn.ns, "hello", api.FunctionFields{TimeoutSec: ptr.To(int32(0))}); err != nil || fn.TimeoutSec != 0 {
		t.Fatalf("set timeout_sec 0: %v, %d", err, fn.TimeoutSec)
	}

	got, err := tn.c.GetFunction(ctx, tn.ns, "hello")
	if err != nil || got.MemoryMB != 256 || got.Namespace != tn.ns {
		t.Fatalf("get = %+v, %v", got, err)
	}
	list, err := tn.c.ListFunctions(ctx, tn.ns)
	if err != nil || len(list) != 1 || list[0].Name != "hello" {
		t.Fatalf("list = %+v, %v", list, err)
	}

	// Traffic naming a revision the function does not have is a 400 naming the field, and
	// nothing changes.
	var ae *client.Error
	split := []api.TrafficTarget{{Revision: "hello-1", Percent: 50}, {Latest: true, Percent: 50, Tag: "canary"}}
	_, err = tn.c.UpdateFunction(ctx, tn.ns, "hello", api.FunctionFields{MemoryMB: ptr.To(int32(512)), Traffic: &split})
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || !strings.Contains(ae.Message, "traffic[0].revision") {
		t.Fatalf("traffic naming no revision: %v, want 400 naming traffic[0].revision", err)
	}
	if got, _ := tn.c.GetFunction(ctx, tn.ns, "hello"); got.MemoryMB != 256 || len(got.Traffic) != 1 || !got.Traffic[0].Latest || got.RevisionHistoryLimit != 10 {
		t.Fatalf("after a refused update: %+v", got.FunctionSpec)
	}
	// The operator's revisions (made here as it would): listed, and a split may name them.
	addRevision(t, tn.ns, "hello", 1, v1alpha1.RevisionPhase(api.RevisionReady))
	addRevision(t, tn.ns, "hello", 2, v1alpha1.RevisionPhase(api.RevisionFailed))
	rollout := api.Rollout{Steps: []int32{10, 100}, IntervalSec: 30, MaxErrorRate: 0.05, MinRequests: 20}
	fn, err = tn.c.UpdateFunction(ctx, tn.ns, "hello", api.FunctionFields{Traffic: &split, Rollout: &rollout, RevisionHistoryLimit: ptr.To(int32(5))})
	if err != nil || !slices.Equal(fn.Traffic, split) || fn.Rollout == nil || fn.Rollout.MaxErrorRate != 0.05 || fn.RevisionHistoryLimit != 5 {
		t.Fatalf("split stored: %+v, %v", fn.FunctionSpec, err)
	}
	failed := []api.TrafficTarget{{Revision: "hello-2", Percent: 100}}
	if _, err := tn.c.UpdateFunction(ctx, tn.ns, "hello", api.FunctionFields{Traffic: &failed}); !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || !strings.Contains(ae.Message, "failed") {
		t.Fatalf("traffic to a failed revision: %v, want 400", err)
	}
	setTraffic(t, tn.ns, "hello", v1alpha1.ResolvedTrafficTarget{Revision: "hello-1", Percent: 50}, v1alpha1.ResolvedTrafficTarget{Revision: "hello-1", Latest: true, Percent: 50, Tag: "canary"})
	revs, err := tn.c.ListRevisions(ctx, tn.ns, "hello")
	if err != nil || len(revs) != 2 || revs[0].Name != "hello-1" || revs[0].Percent != 100 || !slices.Equal(revs[0].Tags, []string{"canary"}) ||
		revs[0].Config.Runtime != "python3.11" || revs[0].Status.Phase != api.RevisionReady || revs[1].Status.Phase != api.RevisionFailed || revs[1].Percent != 0 {
		t.Fatalf("revisions = %+v, %v", revs, err)
	}
	if rev, err := tn.c.GetRevision(ctx, tn.ns, "hello", "hello-1"); err != nil || rev.Number != 1 {
		t.Fatalf("get revision = %+v, %v", rev, err)
	}
	if fn, err = tn.c.Rollback(ctx, tn.ns, "hello", ""); err == nil {
		t.Fatalf("rollback with no older ready revision: %+v", fn.Traffic)
	}
	if fn, err = tn.c.Rollback(ctx, tn.ns, "hello", "hello-1"); err != nil || len(fn.Traffic) != 2 || fn.Traffic[0] != (api.TrafficTarget{Revision: "hello-1", Percent: 100}) {
		t.Fatalf("rollback to hello-1: %+v, %v", fn.Traffic, err)
	}

	if _, err := tn.c.CreateFunction(ctx, tn.ns, api.CreateFunction{Name: "hello", FunctionFields: api.FunctionFields{Runtime: ptr.To("go1.23")}}); !client.IsConflict(err) {
		t.Fatalf("create twice: %v, want 409", err)
	}
	if err := tn.c.DeleteFunction(ctx, tn.ns, "hello"); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.GetFunction(ctx, tn.ns, "hello"); !client.IsNotFound(err) {
		t.Fatalf("get after delete: %v, want 404", err)
	}
	if err := tn.c.DeleteFunction(ctx, tn.ns, "hello"); !client.IsNotFound(err) {
		t.Fatalf("delete twice: %v, want 404", err)
	}
}

// TestFunctionStatus checks that status written by the reconciler reaches the API, and that
// ready needs the status to describe the current generation.
func TestFunctionStatus(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tn := h.tenant()
	ctx := context.Background()
	tn.newFunction(t, "st")
	setStatus(t, tn.ns, "st", "st.example", true)
	fn, err := tn.c.GetFunction(ctx, tn.ns, "st")
	if err != nil {
		t.Fatal(err)
	}
	if fn.Status.Phase != api.PhaseReady || !fn.Status.Ready || fn.Status.URL == "" {
		t.Fatalf("status = %+v, want Ready with a URL", fn.Status)
	}
	fn, err = tn.c.UpdateFunction(ctx, tn.ns, "st", api.FunctionFields{MemoryMB: ptr.To(int32(64))})
	if err != nil {
		t.Fatal(err)
	}
	if fn.Status.Ready {
		t.Fatal("ready right after a spec change: the status describes the previous generation")
	}
}

func TestTriggers(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tn := h.tenant()
	ctx := context.Background()
	tn.newFunction(t, "f")
	cron, err := tn.c.CreateTrigger(ctx, tn.ns, api.CreateTrigger{Name: "nightly", TriggerFields: api.TriggerFields{
		Type: ptr.To("cron"), Function: ptr.To("f"), Schedule: ptr.To("30 2 * * *"), Timezone: ptr.To("Europe/Berlin"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !cron.Enabled || cron.Schedule != "30 2 * * *" || cron.Timezone != "Europe/Berlin" {
		t.Fatalf("created %+v", cron.TriggerSpec)
	}
	ev, err := tn.c.CreateTrigger(ctx, tn.ns, api.CreateTrigger{Name: "orders", TriggerFields: api.TriggerFields{
		Type: ptr.To("event"), Function: ptr.To("f"), Queue: ptr.To(tn.ns + ".orders"), BrokerSecret: ptr.To("rabbit"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if ev.MaxAttempts != 3 || ev.BrokerSecretKey != "host" {
		t.Fatalf("event trigger defaults: %+v", ev.TriggerSpec)
	}

	// PATCH {"enabled": false} freezes in place and changes nothing else.
	off, err := tn.c.SetTriggerEnabled(ctx, tn.ns, "nightly", false)
	if err != nil {
		t.Fatal(err)
	}
	if off.Enabled || off.Schedule != "30 2 * * *" || off.Timezone != "Europe/Berlin" || !off.CreatedAt.Equal(cron.CreatedAt) {
		t.Fatalf("after disabling: %+v", off)
	}
	code, e, _ := do(t, "PATCH", h.URL+"/v1/namespaces/"+tn.ns+"/triggers/nightly", tn.token, "application/json", strings.NewReader(`{"type":"http"}`))
	if code != http.StatusBadRequest || e.Field != "type" {
		t.Fatalf("changing the type: %d %+v, want 400 on type", code, e)
	}
	list, err := tn.c.ListTriggers(ctx, tn.ns)
	if err != nil || len(list) != 2 || list[0].Name != "nightly" || list[1].Name != "orders" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if err := tn.c.DeleteTrigger(ctx, tn.ns, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.GetTrigger(ctx, tn.ns, "orders"); !client.IsNotFound(err) {
		t.Fatalf("get deleted trigger: %v", err)
	}
}

// TestTriggerSources: every answer of the trigger routes carries its kind's status.source —
// the table devplane runs too.
func TestTriggerSources(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tn := h.tenant()
	tn.newFunction(t, "f")
	backendtest.RunTriggerSources(t, tn.c, tn.ns, "f")
}

func TestJobs(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tn := h.tenant()
	ctx := context.Background()
	j, err := tn.c.CreateJob(ctx, tn.ns, api.CreateJob{Name: "once", JobFields: api.JobFields{
		Function: ptr.To("f"), Event: ptr.To(jsonRaw(`{"n": 1}`)),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if j.Function != "f" || j.RunID != 0 || string(j.Event) != `{"n":1}` {
		t.Fatalf("created job %+v (event %s)", j.JobSpec, j.Event)
	}
	j, err = tn.c.UpdateJob(ctx, tn.ns, "once", api.JobFields{RunID: ptr.To(int64(1))})
	if err != nil || j.RunID != 1 || string(j.Event) != `{"n":1}` {
		t.Fatalf("raise run_id: %+v, %v", j.JobSpec, err)
	}
	self, err := tn.c.CreateJob(ctx, tn.ns, api.CreateJob{Name: "self", JobFields: api.JobFields{Runtime: ptr.To("python3.12"), Image: ptr.To("registry.example/fn:1")}})
	if err != nil || self.Runtime != "python3.12" {
		t.Fatalf("self-contained job: %+v, %v", self, err)
	}
	jobs, err := tn.c.ListJobs(ctx, tn.ns)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("list = %d jobs, %v", len(jobs), err)
	}
	if err := tn.c.DeleteJob(ctx, tn.ns, "once"); err != nil {
		t.Fatal(err)
	}
	if _, err := tn.c.GetJob(ctx, tn.ns, "once"); !client.IsNotFound(err) {
		t.Fatalf("deleted job: %v", err)
	}
}
