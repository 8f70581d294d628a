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
// the same minute tick; the one whose trigger asks for prewarm_seconds was woken by the
// operator through the interceptor beforehand, so its tick's invocation records no cold
// start, while the other's does; afterwards the pre-warmed one scales back to zero.
func TestCronPrewarm(t *testing.T) {
	t.Parallel() // waits for minute ticks, beside the other slow journeys
	const prewarm = 30
	tn := newTenant(t)
	tenantSecrets(t, tn)
	ctx := context.Background()
	for _, fn := range []string{"warmed", "unwarmed"} {
		deployFunction(t, tn, fn, helloFields(5), map[string]string{"handler.py": helloPython})
	}
	for _, fn := range []string{"warmed", "unwarmed"} {
		waitScaledToZero(t, tn.ns, fn, 3*time.Minute)
	}
	// The tick judged must leave the whole window: one at least prewarm+10 s away.
	tick := nextTick(time.Now())
	if time.Until(tick) < (prewarm+10)*time.Second {
		tick = tick.Add(time.Minute)
	}
	for fn, seconds := range map[string]*int32{"warmed": ptr.To(int32(prewarm)), "unwarmed": nil} {
		if _, err := tn.c.CreateTrigger(ctx, tn.ns, api.CreateTrigger{Name: fn + "-tick", TriggerFields: api.TriggerFields{
			Type: ptr.To("cron"), Function: ptr.To(fn), Schedule: ptr.To("* * * * *"), PrewarmSeconds: seconds}}); err != nil {
			t.Fatal(err)
		}
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
	// The window ends 15 s after the tick; the next begins 30 s before the next tick.
	if _, err := tn.c.SetTriggerEnabled(ctx, tn.ns, "warmed-tick", false); err != nil {
		t.Fatal(err)
	}
	waitScaledToZero(t, tn.ns, "warmed", 2*time.Minute)
}
