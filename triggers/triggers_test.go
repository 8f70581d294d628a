package triggers

import (
	"bytes"
	"os"
	"testing"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
)

// TestKindsWellFormed: names are unique, every field reads and applies itself, and no wire
// field or CRD path belongs to two kinds.
func TestKindsWellFormed(t *testing.T) {
	names, fields, paths := map[string]bool{}, map[string]string{}, map[string]string{}
	for _, k := range All() {
		if names[k.Name()] {
			t.Errorf("kind %s registered twice", k.Name())
		}
		names[k.Name()] = true
		for _, f := range k.Fields() {
			if f.Get == nil || f.Set == nil {
				t.Errorf("%s.%s: Get and Set are required", k.Name(), f.Name)
			}
			if other, ok := fields[f.Name]; ok {
				t.Errorf("field %s belongs to %s and %s", f.Name, other, k.Name())
			}
			fields[f.Name] = k.Name()
		}
		for path := range k.CRDFields() {
			if other, ok := paths[path]; ok {
				t.Errorf("CRD path %s belongs to %s and %s", path, other, k.Name())
			}
			paths[path] = k.Name()
		}
	}
}

// TestMisplaced: a field only another kind takes is named; a kind's own and defaulted
// fields are not.
func TestMisplaced(t *testing.T) {
	cases := []struct {
		spec api.TriggerSpec
		want string
	}{
		{api.TriggerSpec{Type: api.TriggerCron, Schedule: "@daily"}, ""},
		{api.TriggerSpec{Type: api.TriggerCron, Schedule: "@daily", Queue: "q"}, "queue"},
		{api.TriggerSpec{Type: api.TriggerEvent, Queue: "q", MaxAttempts: 3, Timezone: "UTC"}, "timezone"},
		{api.TriggerSpec{Type: api.TriggerEvent, RequireAuth: true}, "require_auth"},
		{api.TriggerSpec{Type: api.TriggerHTTP, RequireAuth: true, MaxAttempts: 3}, ""},
		{api.TriggerSpec{Type: api.TriggerHTTP, PrewarmSeconds: 5}, "prewarm_seconds"},
	}
	for _, tc := range cases {
		if got := Misplaced(tc.spec); got != tc.want {
			t.Errorf("Misplaced(%+v) = %q, want %q", tc.spec, got, tc.want)
		}
	}
}

// TestCRDRoundTrip: what the API sets on a Trigger reads back the same.
func TestCRDRoundTrip(t *testing.T) {
	for _, s := range []api.TriggerSpec{
		{Type: api.TriggerHTTP, Function: "f", Enabled: true, RequireAuth: true},
		{Type: api.TriggerCron, Function: "f", Schedule: "0 3 * * *", Timezone: "Europe/Berlin", PrewarmSeconds: 30},
		{Type: api.TriggerEvent, Function: "f", Enabled: true, Queue: "ns.q", BrokerSecret: "b", BrokerSecretKey: "url",
			MaxAttempts: 4, BackoffMs: 10, DeadLetterQueue: "ns.dlq"},
	} {
		var crd v1alpha1.TriggerSpec
		ToCRD(&crd, s)
		if got := FromCRD(crd); got != s {
			t.Errorf("round trip of %+v gave %+v", s, got)
		}
	}
}

// TestDescribeGenerated: gateway/api's copy of the kinds for clients is what the kinds say
// (make generate writes it).
func TestDescribeGenerated(t *testing.T) {
	want, err := DescribeSource()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../gateway/api/zz_generated.triggerkinds.go")
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("gateway/api/zz_generated.triggerkinds.go is stale (%v): run make generate", err)
	}
}
