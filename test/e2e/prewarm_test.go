//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
)

// TestCronPrewarm is the scheduled pre-warm on the real KEDA: two functions at zero fire on
// the same tick of an every-two-minutes schedule; the one whose trigger asks for
// prewarm_seconds was woken by the operator through the interceptor beforehand and has a
// ready pod all through the seconds around the tick, so its tick's invocation records no cold
// start, while the other's does; afterwards, with its trigger still on, the pre-warmed one
// scales back to zero on its own before the next tick's pre-warm begins.
func TestCronPrewarm(t *testing.T) {
	t.Parallel()
	const prewarm = 30
	tn := newTenant(t)
	tenantSecrets(t, tn)
	ctx := context.Background()
	for _, fn := range []string{"warmed", "unwarmed"} {
		deployHello(t, tn, fn, helloFields(5))
	}
	for _, fn := range []string{"warmed", "unwarmed"} {
		waitScaledToZero(t, tn.ns, fn, 3*time.Minute)
	}
	// Every two minutes, so that between one tick's window and the next pre-warm there is time
	// to scale to zero; the tick judged must leave the whole window: at least prewarm+10 s away.
	const every = 2 * time.Minute
	tick := time.Now().Truncate(every).Add(every)
	if time.Until(tick) < (prewarm+10)*time.Second {
		tick = tick.Add(every)
	}
	for fn, seconds := range map[string]*int32{"warmed": ptr.To(int32(prewarm)), "unwarmed": nil} {
		if _, err := tn.c.CreateTrigger(ctx, tn.ns, api.CreateTrigger{Name: fn + "-tick", TriggerFields: api.TriggerFields{
			Type: ptr.To("cron"), Function: ptr.To(fn), Schedule: ptr.To("*/2 * * * *"), PrewarmSeconds: seconds}}); err != nil {
			t.Fatal(err)
		}
	}
	// It stays up over the tick: a ready pod from 10 s before it to 10 s after.
	time.Sleep(time.Until(tick.Add(-10 * time.Second)))
	for time.Now().Before(tick.Add(10 * time.Second)) {
		if d := deployment(t, tn.ns, "warmed"); d.Status.ReadyReplicas < 1 {
			t.Fatalf("the pre-warmed function had no ready pod %s before its tick", fmtDur(time.Until(tick)))
		}
		time.Sleep(500 * time.Millisecond)
	}
	cronAt := func(fn string) *api.Invocation {
		inv, err := tn.c.ListInvocations(ctx, tn.ns, fn, 50, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range inv.Invocations {
			if i.Kind == "cron" && !i.Start.Before(tick.Add(-time.Second)) && i.Start.Before(tick.Add(30*time.Second)) {
				return &i
			}
		}
		return nil
	}
	var warmed, unwarmed *api.Invocation
	waitFor(t, time.Until(tick)+2*time.Minute, "both functions' invocations of the "+tick.Format(time.TimeOnly)+" tick", func() bool {
		warmed, unwarmed = cronAt("warmed"), cronAt("unwarmed")
		return warmed != nil && unwarmed != nil
	})
	if warmed.ColdStart || warmed.HTTPStatus != 200 {
		t.Errorf("the pre-warmed tick paid a cold start: %+v", *warmed)
	}
	if !unwarmed.ColdStart {
		t.Errorf("the tick of a function at zero without pre-warm recorded no cold start: %+v", *unwarmed)
	}
	t.Logf("tick %s: pre-warmed %s after the tick (cold start %t), without pre-warm %s (cold start %t)", tick.Format(time.TimeOnly),
		fmtDur(warmed.Start.Sub(tick)+time.Duration(warmed.DurationMs*float64(time.Millisecond))), warmed.ColdStart,
		fmtDur(unwarmed.Start.Sub(tick)+time.Duration(unwarmed.DurationMs*float64(time.Millisecond))), unwarmed.ColdStart)
	// The window ends PrewarmMargin after the tick and the next begins prewarm before the next
	// tick: in between, with the trigger still on, the function goes back to zero by itself.
	nextWarm := tick.Add(every - prewarm*time.Second)
	waitScaledToZero(t, tn.ns, "warmed", time.Until(nextWarm))
	t.Logf("the pre-warmed function was at zero again %s after the tick", fmtDur(time.Since(tick)))
	for _, fn := range []string{"warmed", "unwarmed"} {
		if _, err := tn.c.SetTriggerEnabled(ctx, tn.ns, fn+"-tick", false); err != nil {
			t.Fatal(err)
		}
	}
}
