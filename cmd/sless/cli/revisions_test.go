package cli

import (
	"reflect"
	"strings"
	"testing"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

func TestParseTraffic(t *testing.T) {
	for _, tc := range []struct {
		name         string
		shares, tags []string
		want         []api.TrafficTarget
		err          string
	}{
		{"split", []string{"hello-3=90", "latest=10"}, nil,
			[]api.TrafficTarget{{Revision: "hello-3", Percent: 90}, {Latest: true, Percent: 10}}, ""},
		{"percent sign", []string{"latest=100%"}, nil, []api.TrafficTarget{{Latest: true, Percent: 100}}, ""},
		{"tag on a share", []string{"hello-3=100"}, []string{"canary=latest"},
			[]api.TrafficTarget{{Revision: "hello-3", Percent: 100}, {Latest: true, Tag: "canary"}}, ""},
		{"tag on an entry with a share", []string{"hello-3=90", "latest=10"}, []string{"stable=hello-3"},
			[]api.TrafficTarget{{Revision: "hello-3", Percent: 90, Tag: "stable"}, {Latest: true, Percent: 10}}, ""},
		{"two tags, one revision", []string{"hello-3=100"}, []string{"a=hello-3", "b=hello-3"},
			[]api.TrafficTarget{{Revision: "hello-3", Percent: 100, Tag: "a"}, {Revision: "hello-3", Tag: "b"}}, ""},
		{"no percent", []string{"hello-3"}, nil, nil, "want <revision|latest>=<percent>"},
		{"not a number", []string{"latest=ten"}, nil, nil, "want <revision|latest>=<percent>"},
		{"twice", []string{"latest=50", "latest=50"}, nil, nil, "given twice"},
		{"bad tag", []string{"latest=100"}, []string{"canary"}, nil, "want <tag>=<revision|latest>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTraffic(tc.shares, tc.tags)
			wantOutcome(t, got, err, tc.want, tc.err)
		})
	}
}

func FuzzParseTraffic(f *testing.F) {
	f.Add("hello-3=90 latest=10", "canary=latest")
	f.Add("latest=100%", "")
	f.Add("=", "=")
	f.Fuzz(func(t *testing.T, shares, tags string) {
		out, err := parseTraffic(strings.Fields(shares), strings.Fields(tags))
		if err != nil {
			return
		}
		// Whatever parses names a target in every entry; the server checks the rest.
		for _, e := range out {
			if e.Latest == (e.Revision != "") {
				t.Fatalf("entry %+v of %q %q names no single target", e, shares, tags)
			}
		}
	})
}

func TestPinTraffic(t *testing.T) {
	for _, tc := range []struct {
		name      string
		current   []api.TrafficTarget
		ready     string
		noTraffic bool
		tag       string
		want      []api.TrafficTarget
		err       string
	}{
		{"no traffic", rules.DefaultTraffic(), "f-2", true, "", []api.TrafficTarget{{Revision: "f-2", Percent: 100}}, ""},
		{"no traffic, tagged", rules.DefaultTraffic(), "f-2", true, "canary",
			[]api.TrafficTarget{{Revision: "f-2", Percent: 100}, {Latest: true, Tag: "canary"}}, ""},
		{"tag only: latest keeps its share", rules.DefaultTraffic(), "f-2", false, "canary",
			[]api.TrafficTarget{{Latest: true, Percent: 100}, {Latest: true, Tag: "canary"}}, ""},
		{"the tag moves", []api.TrafficTarget{{Revision: "f-1", Percent: 100}, {Revision: "f-2", Tag: "canary"}}, "f-2", true, "canary",
			[]api.TrafficTarget{{Revision: "f-1", Percent: 100}, {Latest: true, Tag: "canary"}}, ""},
		{"nothing ready", rules.DefaultTraffic(), "", true, "", nil, "no ready revision"},
		{"bad tag", rules.DefaultTraffic(), "f-2", false, "Can-ary", nil, "not a valid tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pinTraffic(tc.current, tc.ready, tc.noTraffic, tc.tag)
			if !wantOutcome(t, got, err, tc.want, tc.err) {
				return
			}
			if ferr := rules.CheckTraffic("f", got); ferr != nil {
				t.Fatalf("pinned traffic is refused: %v", ferr)
			}
		})
	}
}

// wantOutcome fails t unless err holds wantErr (when set) or got equals want; it reports
// whether got is a value to check further.
func wantOutcome[T any](t *testing.T, got T, err error, want T, wantErr string) bool {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("got %+v, %v; want error %q", got, err, wantErr)
		}
		return false
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
	return true
}
