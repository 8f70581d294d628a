//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/scaling"
)

// cronJobs lists the Jobs kube-controller-manager's CronJob controller started for trigger.
func cronJobs(t *testing.T, ns, trigger string) []batchv1.Job {
	t.Helper()
	var l batchv1.JobList
	if err := g.client.List(context.Background(), &l, client.InNamespace(ns), client.MatchingLabels{scaling.LabelTrigger: trigger}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// nextTick is the next whole minute after now.
func nextTick(now time.Time) time.Time { return now.Truncate(time.Minute).Add(time.Minute) }

// TestCronTrigger is journeys 4 and 5 for cron: a trigger firing every minute fires on the
// tick through a real CronJob (kube-controller-manager), the dispatcher's fire mode and the
// interceptor, waking the function at zero; disabled, it suspends the CronJob in place and
// does not fire across a tick; enabled again, it fires on the next one.
func TestCronTrigger(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	tenantSecrets(t, tn)
	ctx := context.Background()
	deployHello(t, tn, "ticker", helloFields(5))
	if _, err := tn.c.CreateTrigger(ctx, tn.ns, api.CreateTrigger{Name: "tick", TriggerFields: api.TriggerFields{
		Type: ptr.To("cron"), Function: ptr.To("ticker"), Schedule: ptr.To("* * * * *")}}); err != nil {
		t.Fatal(err)
	}
	fired := func(after time.Time) int {
		inv, err := tn.c.ListInvocations(ctx, tn.ns, "ticker", 50, "")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, i := range inv.Invocations {
			if i.Kind == "cron" && i.Start.After(after) {
				n++
				if i.HTTPStatus != 200 {
					t.Errorf("cron invocation %+v, want 200", i)
				}
			}
		}
		return n
	}
	tick := nextTick(time.Now())
	waitFor(t, 2*time.Minute, "the first tick to fire", func() bool { return fired(tick.Add(-time.Second)) > 0 })
	answered := time.Since(tick)
	jobs := cronJobs(t, tn.ns, "tick")
	if len(jobs) != 1 {
		t.Fatalf("want one Job for the tick, got %d", len(jobs))
	}
	// The history row carries the scheduled tick; the Job's creation (second precision) and
	// the moment the row appeared show how late the firing really was.
	created := jobs[0].CreationTimestamp.Sub(tick)
	t.Logf("tick %s: CronJob controller created the Job %s after it; the invocation was recorded within %s (pod start + KEDA cold start + history flush)",
		tick.Format(time.TimeOnly), fmtDur(created), fmtDur(answered))
	if created > 10*time.Second {
		t.Errorf("the Job for the %s tick was created %s late, want within 10 s", tick.Format(time.TimeOnly), created)
	}

	if _, err := tn.c.SetTriggerEnabled(ctx, tn.ns, "tick", false); err != nil {
		t.Fatal(err)
	}
	var cj batchv1.CronJob
	waitFor(t, 30*time.Second, "CronJob suspended", func() bool {
		err := g.client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: scaling.CronJobName("tick")}, &cj)
		return err == nil && ptr.Deref(cj.Spec.Suspend, false)
	})
	uid := cj.UID
	jobsBefore := len(cronJobs(t, tn.ns, "tick"))
	quiet := nextTick(time.Now())
	time.Sleep(time.Until(quiet.Add(10 * time.Second)))
	if n := fired(quiet.Add(-time.Second)); n != 0 || len(cronJobs(t, tn.ns, "tick")) != jobsBefore {
		t.Fatalf("a disabled cron trigger fired across the %s tick (%d invocations)", quiet.Format(time.TimeOnly), n)
	}

	if _, err := tn.c.SetTriggerEnabled(ctx, tn.ns, "tick", true); err != nil {
		t.Fatal(err)
	}
	back := nextTick(time.Now())
	waitFor(t, 2*time.Minute, "the tick after re-enabling to fire", func() bool { return fired(back.Add(-time.Second)) > 0 })
	if err := g.client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: scaling.CronJobName("tick")}, &cj); err != nil || cj.UID != uid {
		t.Errorf("the toggle re-created the CronJob (%v); it must change in place", err)
	}
}
