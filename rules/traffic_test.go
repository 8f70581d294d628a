package rules

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestRevisionOf(t *testing.T) {
	for _, c := range []struct {
		rev  string
		fn   string
		n    int64
		okay bool
	}{
		{"hello-3", "hello", 3, true},
		{"my-fn-12", "my-fn", 12, true},
		{"a-1-1", "a-1", 1, true},
		{"hello", "", 0, false},
		{"hello-0", "", 0, false},
		{"hello-01", "", 0, false},
		{"hello-+1", "", 0, false},
		{"hello--1", "", 0, false},
		{"-1", "", 0, false},
		{"hello-x", "", 0, false},
	} {
		fn, n, ok := RevisionOf(c.rev)
		if fn != c.fn || n != c.n || ok != c.okay {
			t.Errorf("RevisionOf(%q) = %q, %d, %v; want %q, %d, %v", c.rev, fn, n, ok, c.fn, c.n, c.okay)
		}
		if ok && RevisionName(fn, n) != c.rev {
			t.Errorf("RevisionName(%q, %d) = %q, not %q", fn, n, RevisionName(fn, n), c.rev)
		}
	}
}

func TestCheckTraffic(t *testing.T) {
	for _, c := range []struct {
		name    string
		targets []TrafficTarget
		field   string // "" means valid
		reason  string
	}{
		{"default", DefaultTraffic(), "", ""},
		{"split", []TrafficTarget{{Revision: "hello-3", Percent: 90}, {Latest: true, Percent: 10, Tag: "canary"}}, "", ""},
		{"tag only", []TrafficTarget{{Revision: "hello-3", Percent: 100}, {Latest: true, Tag: "canary"}}, "", ""},
		{"empty", nil, "traffic", "at least one"},
		{"sum low", []TrafficTarget{{Latest: true, Percent: 90}}, "traffic", "sum to 90"},
		{"sum high", []TrafficTarget{{Latest: true, Percent: 60}, {Revision: "hello-1", Percent: 60}}, "traffic", "sum to 120"},
		{"both", []TrafficTarget{{Latest: true, Revision: "hello-1", Percent: 100}}, "traffic[0].revision", "not both"},
		{"neither", []TrafficTarget{{Percent: 100}}, "traffic[0].revision", "hello-1"},
		{"other function", []TrafficTarget{{Revision: "world-1", Percent: 100}}, "traffic[0].revision", "not a revision of function hello"},
		{"not a revision", []TrafficTarget{{Revision: "hello", Percent: 100}}, "traffic[0].revision", "hello-<n>"},
		{"negative", []TrafficTarget{{Latest: true, Percent: 110}, {Revision: "hello-1", Percent: -10}}, "traffic[0].percent", "0 to 100"},
		{"duplicate tag", []TrafficTarget{{Latest: true, Percent: 50, Tag: "a"}, {Revision: "hello-1", Percent: 50, Tag: "a"}}, "traffic[1].tag", "used twice"},
		{"bad tag", []TrafficTarget{{Latest: true, Percent: 100, Tag: "my-tag"}}, "traffic[0].tag", "no '-'"},
		{"long tag", []TrafficTarget{{Latest: true, Percent: 100, Tag: strings.Repeat("a", MaxTagLength+1)}}, "traffic[0].tag", "at most"},
		{"too many", slices.Repeat([]TrafficTarget{{Latest: true, Percent: 10}}, MaxTrafficTargets+1), "traffic", "at most"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckTraffic("hello", c.targets)
			switch {
			case c.field == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.field != "" && err == nil:
				t.Fatalf("accepted; want %s refused", c.field)
			case c.field != "" && (err.Field != c.field || !strings.Contains(err.Reason, c.reason)):
				t.Fatalf("got %v; want field %s with %q", err, c.field, c.reason)
			}
		})
	}
}

func TestCheckTrafficRevisions(t *testing.T) {
	revs := []RevisionState{{"hello-1", 1, RevisionReady}, {"hello-2", 2, RevisionFailed}, {"hello-3", 3, RevisionBuilding}}
	for _, c := range []struct {
		rev, want string
	}{
		{"hello-1", ""}, {"hello-3", ""}, {"hello-2", "failed"}, {"hello-9", "does not exist"},
	} {
		err := CheckTrafficRevisions([]TrafficTarget{{Latest: true}, {Revision: c.rev, Percent: 100}}, revs)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s refused: %v", c.rev, err)
		case c.want != "" && (err == nil || err.Field != "traffic[1].revision" || !strings.Contains(err.Reason, c.want)):
			t.Errorf("%s: got %v, want traffic[1].revision %q", c.rev, err, c.want)
		}
	}
}

func TestResolveAndShares(t *testing.T) {
	revs := []RevisionState{{"f-1", 1, RevisionReady}, {"f-2", 2, RevisionReady}, {"f-3", 3, RevisionBuilding}}
	if got := LatestReady(revs); got != "f-2" {
		t.Fatalf("LatestReady = %q, want f-2 (f-3 still builds)", got)
	}
	res := ResolveTraffic([]TrafficTarget{{Revision: "f-1", Percent: 70, Tag: "old"}, {Latest: true, Percent: 30}, {Revision: "f-2", Tag: "x"}}, LatestReady(revs))
	if res[1].Revision != "f-2" || !res[1].Latest {
		t.Fatalf("latest resolved to %+v", res[1])
	}
	if p, tags := Shares(res, "f-2"); p != 30 || !slices.Equal(tags, []string{"x"}) {
		t.Fatalf("Shares(f-2) = %d %v", p, tags)
	}
	if Serving(res, "f-3") || !Serving(res, "f-1") {
		t.Fatal("Serving wrong")
	}
	if none := ResolveTraffic(DefaultTraffic(), ""); none[0].Revision != "" {
		t.Fatalf("nothing ready resolved to %q", none[0].Revision)
	}
}

// TestPickTargetSplitsByPercent draws 100,000 picks of a 90/10 split and holds each share
// within the binomial 99.9 % bound; keys always land on the same entry.
func TestPickTargetSplitsByPercent(t *testing.T) {
	res := []ResolvedTarget{{Revision: "f-1", Percent: 90}, {Revision: "f-2", Percent: 0, Tag: "c"}, {Revision: "f-3", Percent: 10}}
	pct := func(t *ResolvedTarget) int32 { return t.Percent }
	const n = 100000
	counts := make([]int, len(res))
	for range n {
		counts[PickTarget(res, pct, "")]++
	}
	if counts[1] != 0 {
		t.Fatalf("a 0 %% entry got %d calls", counts[1])
	}
	bound := 3.29 * math.Sqrt(n*0.9*0.1) // z for 99.9 %, two-sided
	if d := math.Abs(float64(counts[0]) - n*0.9); d > bound {
		t.Fatalf("f-1 got %d of %d, want 90 %% ± %.0f", counts[0], n, bound)
	}
	keyed := map[int]int{}
	for i := range 1000 {
		key := "user-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		first := PickTarget(res, pct, key)
		for range 3 {
			if PickTarget(res, pct, key) != first {
				t.Fatalf("key %s moved", key)
			}
		}
		keyed[first]++
	}
	if keyed[0] == 0 || keyed[2] == 0 || keyed[1] != 0 {
		t.Fatalf("keys landed %v; want both served entries and never the 0 %% one", keyed)
	}
	if PickTarget(res[:1], pct, "") != 0 {
		t.Fatal("single entry not picked")
	}
}

func TestRollbackTarget(t *testing.T) {
	revs := []RevisionState{{"f-1", 1, RevisionReady}, {"f-2", 2, RevisionFailed}, {"f-3", 3, RevisionReady}, {"f-4", 4, RevisionReady}}
	for _, c := range []struct {
		name    string
		traffic []TrafficTarget
		want    string
	}{
		{"latest took everything", DefaultTraffic(), "f-3"},
		{"canary", []TrafficTarget{{Revision: "f-3", Percent: 90}, {Latest: true, Percent: 10}}, "f-3"},
		{"rolled back once", []TrafficTarget{{Revision: "f-3", Percent: 100}}, "f-1"},
		{"oldest", []TrafficTarget{{Revision: "f-1", Percent: 100}}, ""},
	} {
		got, ok := RollbackTarget(revs, ResolveTraffic(c.traffic, LatestReady(revs)))
		if got != c.want || ok != (c.want != "") {
			t.Errorf("%s: RollbackTarget = %q, %v; want %q", c.name, got, ok, c.want)
		}
	}
}

func TestRevisionsToDelete(t *testing.T) {
	var revs []RevisionState
	for i := int64(1); i <= 8; i++ {
		revs = append(revs, RevisionState{RevisionName("f", i), i, RevisionReady})
	}
	revs[7].Phase = RevisionFailed // f-8, latest created; f-7 is latest ready
	res := ResolveTraffic([]TrafficTarget{{Revision: "f-2", Percent: 100}, {Revision: "f-1", Tag: "old"}}, "f-7")
	// idle newest first: f-6 f-5 f-4 f-3; keep 2 → delete f-3 f-4 (oldest first)
	if got := RevisionsToDelete(revs, res, 2); !slices.Equal(got, []string{"f-3", "f-4"}) {
		t.Fatalf("RevisionsToDelete = %v, want [f-3 f-4]", got)
	}
	if got := RevisionsToDelete(revs, res, 10); got != nil {
		t.Fatalf("under the limit deleted %v", got)
	}
	if got := RevisionsToDelete(revs, res, 0); !slices.Equal(got, []string{"f-3", "f-4", "f-5", "f-6"}) {
		t.Fatalf("limit 0 deleted %v", got)
	}
}

func TestSplitTagHost(t *testing.T) {
	for _, c := range []struct{ label, tag, fn string }{
		{"canary-hello", "canary", "hello"}, {"v2-my-fn", "v2", "my-fn"}, {"hello", "", ""}, {"-hello", "", ""}, {"Canary-x", "", ""},
	} {
		tag, fn, ok := SplitTagHost(c.label)
		if tag != c.tag || fn != c.fn || ok != (c.tag != "") {
			t.Errorf("SplitTagHost(%q) = %q %q %v", c.label, tag, fn, ok)
		}
	}
}

func FuzzRevisionOf(f *testing.F) {
	for _, s := range []string{"hello-3", "a-1-1", "x-0", "-", "a-99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fn, n, ok := RevisionOf(s)
		if ok && RevisionName(fn, n) != s {
			t.Fatalf("RevisionOf(%q) = %q %d does not round-trip", s, fn, n)
		}
	})
}

// FuzzSplitTagHost: whatever a Host header's first label holds, a split it accepts is a valid
// tag and function name that join back to the label.
func FuzzSplitTagHost(f *testing.F) {
	for _, s := range []string{"canary-hello", "v2-my-fn", "-", "a-", "Canary-x", "a--b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, label string) {
		tag, fn, ok := SplitTagHost(label)
		if !ok {
			return
		}
		if CheckTag(tag) != nil || CheckName(fn) != nil || tag+"-"+fn != label {
			t.Fatalf("SplitTagHost(%q) = %q, %q", label, tag, fn)
		}
	})
}
