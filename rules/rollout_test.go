package rules

import (
	"strings"
	"testing"
	"time"
)

func TestCheckRollout(t *testing.T) {
	ok := Rollout{Steps: []int32{10, 50, 100}, IntervalSec: 60, MaxErrorRate: 0.05, MinRequests: 20}
	if err := CheckRollout(ok); err != nil {
		t.Fatalf("refused %+v: %v", ok, err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Rollout)
		field string
	}{
		{"no steps", func(r *Rollout) { r.Steps = nil }, "rollout.steps"},
		{"not ending at 100", func(r *Rollout) { r.Steps = []int32{10, 50} }, "rollout.steps"},
		{"falling", func(r *Rollout) { r.Steps = []int32{50, 10, 100} }, "rollout.steps"},
		{"zero step", func(r *Rollout) { r.Steps = []int32{0, 100} }, "rollout.steps"},
		{"interval 0", func(r *Rollout) { r.IntervalSec = 0 }, "rollout.interval_sec"},
		{"rate above 1", func(r *Rollout) { r.MaxErrorRate = 1.5 }, "rollout.max_error_rate"},
		{"negative min", func(r *Rollout) { r.MinRequests = -1 }, "rollout.min_requests"},
	} {
		r := ok
		r.Steps = append([]int32(nil), ok.Steps...)
		tc.edit(&r)
		if err := CheckRollout(r); err == nil || err.Field != tc.field {
			t.Errorf("%s: got %v, want a refusal of %s", tc.name, err, tc.field)
		}
	}
}

func TestRolloutSteps(t *testing.T) {
	p := Rollout{Steps: []int32{10, 50, 100}, IntervalSec: 60, MaxErrorRate: 0.05, MinRequests: 20}
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	st := StartRollout(p, "f-2", "f-1", t0)
	if st.Phase != RolloutProgressing || st.Percent != 10 {
		t.Fatalf("start: %+v", st)
	}
	// Within the interval: held, whatever the calls.
	if s := AdvanceRollout(p, st, 100, 0, t0.Add(30*time.Second)); s.Percent != 10 || s.Phase != RolloutProgressing {
		t.Fatalf("mid-interval: %+v", s)
	}
	// After the interval without enough calls: held.
	if s := AdvanceRollout(p, st, 19, 0, t0.Add(61*time.Second)); s.Percent != 10 {
		t.Fatalf("too few calls advanced: %+v", s)
	}
	// 1 of 20 failed = 0.05: at the limit, next step.
	st = AdvanceRollout(p, st, 20, 1, t0.Add(61*time.Second))
	if st.Percent != 50 || st.Requests != 0 || !st.StepStarted.Equal(t0.Add(61*time.Second)) {
		t.Fatalf("second step: %+v", st)
	}
	// Above the limit rolls back at once, mid-interval.
	bad := AdvanceRollout(p, st, 20, 2, t0.Add(62*time.Second))
	if bad.Phase != RolloutRolledBack || !strings.Contains(bad.Message, "error rate 0.10 (2 of 20 calls) above 0.05 at 50 %") {
		t.Fatalf("rollback: %+v", bad)
	}
	if again := AdvanceRollout(p, bad, 0, 0, t0.Add(time.Hour)); again.Phase != RolloutRolledBack {
		t.Fatalf("a rolled back rollout moved: %+v", again)
	}
	st = AdvanceRollout(p, st, 40, 0, t0.Add(122*time.Second))
	if st.Phase != RolloutComplete || st.Percent != 100 {
		t.Fatalf("complete: %+v", st)
	}
}

func TestApplyRollout(t *testing.T) {
	st := &RolloutState{Revision: "f-2", Previous: "f-1", Phase: RolloutProgressing, Percent: 10}
	res := ApplyRollout(ResolveTraffic([]TrafficTarget{{Latest: true, Percent: 80}, {Revision: "f-0", Percent: 20}, {Latest: true, Tag: "c"}}, "f-2"), st)
	if p, _ := Shares(res, "f-2"); p != 8 {
		t.Fatalf("f-2 got %d %%, want 8 (10 %% of latest's 80): %+v", p, res)
	}
	if p, _ := Shares(res, "f-1"); p != 72 {
		t.Fatalf("f-1 got %d %%: %+v", p, res)
	}
	if _, tags := Shares(res, "f-2"); len(tags) != 1 || tags[0] != "c" {
		t.Fatalf("the tag left the new revision: %+v", res)
	}
	rolled := &RolloutState{Revision: "f-2", Previous: "f-1", Phase: RolloutRolledBack}
	if got := LatestDuringRollout("f-2", rolled); got != "f-1" {
		t.Fatalf("latest after a rollback resolves to %s", got)
	}
	if got := LatestDuringRollout("f-3", rolled); got != "f-3" {
		t.Fatalf("a newer revision after a rollback resolves to %s", got)
	}
}
