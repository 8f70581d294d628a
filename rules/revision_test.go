package rules

import (
	"reflect"
	"testing"
	"time"
)

func TestSettleRevision(t *testing.T) {
	building := RevisionStatus{Phase: RevisionBuilding, Message: "building"}
	none := func() string { return "" }
	for _, tc := range []struct {
		name    string
		cur     RevisionStatus
		latest  bool
		build   Build
		missing func() string
		want    RevisionStatus
	}{
		{"ready is final", RevisionStatus{Phase: RevisionReady, Image: "i@1"}, false, Build{State: BuildFailed, Message: "x"}, none,
			RevisionStatus{Phase: RevisionReady, Image: "i@1"}},
		{"failed is final", RevisionStatus{Phase: RevisionFailed, Message: "m"}, true, Build{State: BuildSucceeded, Image: "i@2"}, none,
			RevisionStatus{Phase: RevisionFailed, Message: "m"}},
		{"superseded", building, false, Build{State: BuildSucceeded, Image: "i@2"}, none,
			RevisionStatus{Phase: RevisionFailed, Message: "superseded by a newer revision before its image was built"}},
		{"no build yet", RevisionStatus{}, true, Build{State: BuildPending}, none,
			RevisionStatus{Phase: RevisionBuilding, Message: "waiting for the build to start"}},
		{"building", RevisionStatus{}, true, Build{State: BuildRunning, Message: "step 2 of 5"}, none,
			RevisionStatus{Phase: RevisionBuilding, Message: "step 2 of 5"}},
		{"built", building, true, Build{State: BuildSucceeded, Image: "i@3"}, none,
			RevisionStatus{Phase: RevisionReady, Image: "i@3"}},
		{"built, nothing can be missing", RevisionStatus{}, true, Build{State: BuildSucceeded, Image: "i@3"}, nil,
			RevisionStatus{Phase: RevisionReady, Image: "i@3"}},
		{"built, a secret missing", building, true, Build{State: BuildSucceeded, Image: "i@3"}, func() string { return "secret db" },
			RevisionStatus{Phase: RevisionBuilding, Message: "built; waiting for a secret: secret db"}},
		{"build failed", building, true, Build{State: BuildFailed, Message: "build failed: syntax"}, none,
			RevisionStatus{Phase: RevisionFailed, Message: "build failed: syntax"}},
	} {
		if got := SettleRevision(tc.cur, tc.latest, tc.build, tc.missing); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

type stateful struct{ name string }

func (s stateful) RevisionState() RevisionState {
	return RevisionState{Name: s.name, Phase: RevisionReady}
}

func TestStatesOf(t *testing.T) {
	got := StatesOf([]stateful{{"f-1"}, {"f-2"}})
	want := []RevisionState{{Name: "f-1", Phase: RevisionReady}, {Name: "f-2", Phase: RevisionReady}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("StatesOf = %+v, want %+v", got, want)
	}
}

func TestDesiredTraffic(t *testing.T) {
	progressing := &RolloutState{Revision: "f-2", Previous: "f-1", Phase: RolloutProgressing, Percent: 20}
	rolledBack := &RolloutState{Revision: "f-2", Previous: "f-1", Phase: RolloutRolledBack}
	for _, tc := range []struct {
		name    string
		targets []TrafficTarget
		latest  string
		rollout *RolloutState
		want    []ResolvedTarget
	}{
		{"none follows latest", nil, "f-2", nil, []ResolvedTarget{{Revision: "f-2", Latest: true, Percent: 100}}},
		{"none ready", nil, "", nil, []ResolvedTarget{{Latest: true, Percent: 100}}},
		{"pinned and latest", []TrafficTarget{{Revision: "f-1", Percent: 70}, {Latest: true, Percent: 30, Tag: "next"}}, "f-2", nil,
			[]ResolvedTarget{{Revision: "f-1", Percent: 70}, {Revision: "f-2", Latest: true, Percent: 30, Tag: "next"}}},
		{"rollout in progress", nil, "f-2", progressing,
			[]ResolvedTarget{{Revision: "f-2", Latest: true, Percent: 20}, {Revision: "f-1", Latest: true, Percent: 80}}},
		{"rolled back", nil, "f-2", rolledBack, []ResolvedTarget{{Revision: "f-1", Latest: true, Percent: 100}}},
	} {
		if got := DesiredTraffic(tc.targets, tc.latest, tc.rollout); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestNextRollout(t *testing.T) {
	p := &Rollout{Steps: []int32{10, 100}, IntervalSec: 60, MaxErrorRate: 0.1, MinRequests: 10}
	now := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	started := now.Truncate(time.Second)
	step := func(phase string) *RolloutState {
		return &RolloutState{Revision: "f-3", Previous: "f-2", Phase: phase, Percent: 10, StepStarted: started.Add(-time.Minute)}
	}
	calls := func(requests, errors int64, hold string) func(string, time.Time) (int64, int64, string) {
		return func(rev string, since time.Time) (int64, int64, string) {
			if rev != "f-3" || !since.Equal(started.Add(-time.Minute)) {
				t.Errorf("outcomes of %s since %s", rev, since)
			}
			return requests, errors, hold
		}
	}
	unused := func(string, time.Time) (int64, int64, string) {
		t.Error("outcomes read where there is nothing to judge")
		return 0, 0, ""
	}
	for _, tc := range []struct {
		name              string
		policy            *Rollout
		st                *RolloutState
		latest, prev      string
		outcomes          func(string, time.Time) (int64, int64, string)
		phase             string
		percent           int32
		previous, message string
		rolledBack, isNil bool
		started           time.Time
	}{
		{name: "no policy", st: step(RolloutProgressing), latest: "f-3", prev: "f-2", outcomes: unused, isNil: true},
		{name: "first ready revision", policy: p, latest: "f-1", outcomes: unused, isNil: true},
		{name: "new ready revision starts in whole seconds", policy: p, latest: "f-3", prev: "f-2", outcomes: unused,
			phase: RolloutProgressing, percent: 10, previous: "f-2", started: started},
		{name: "newer one during a rollout starts from its previous", policy: p, st: step(RolloutProgressing), latest: "f-4", prev: "f-3",
			outcomes: unused, phase: RolloutProgressing, percent: 10, previous: "f-2", started: started},
		{name: "newer one after a complete rollout", policy: p, st: step(RolloutComplete), latest: "f-4", prev: "f-3",
			outcomes: unused, phase: RolloutProgressing, percent: 10, previous: "f-3", started: started},
		{name: "complete stays", policy: p, st: step(RolloutComplete), latest: "f-3", prev: "f-3", outcomes: unused,
			phase: RolloutComplete, percent: 10, previous: "f-2", started: started.Add(-time.Minute)},
		{name: "holds", policy: p, st: step(RolloutProgressing), latest: "f-3", prev: "f-3", outcomes: calls(0, 0, "no history"),
			phase: RolloutProgressing, percent: 10, previous: "f-2", message: "holding: no history", started: started.Add(-time.Minute)},
		{name: "healthy step advances", policy: p, st: step(RolloutProgressing), latest: "f-3", prev: "f-3", outcomes: calls(20, 1, ""),
			phase: RolloutComplete, percent: 100, previous: "f-2", started: started},
		{name: "failing step rolls back", policy: p, st: step(RolloutProgressing), latest: "f-3", prev: "f-3", outcomes: calls(20, 5, ""),
			phase: RolloutRolledBack, percent: 10, previous: "f-2", rolledBack: true, started: started.Add(-time.Minute)},
	} {
		got, rolledBack := NextRollout(tc.policy, tc.st, tc.latest, tc.prev, now, tc.outcomes)
		switch {
		case tc.isNil != (got == nil) || rolledBack != tc.rolledBack:
			t.Errorf("%s: %+v, rolled back %t", tc.name, got, rolledBack)
		case got == nil:
		case got.Phase != tc.phase || got.Percent != tc.percent || got.Previous != tc.previous || !got.StepStarted.Equal(tc.started) ||
			tc.message != "" && got.Message != tc.message:
			t.Errorf("%s: %+v", tc.name, got)
		}
	}
}
