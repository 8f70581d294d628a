package backendtest

import (
	"context"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/client"
	"sless.dev/sless/triggers"
)

// sourceRow is a trigger of each kind and the end of its status.source (an http trigger's
// starts with its URL once the plane has set it).
type sourceRow struct {
	name   string
	fields func(ns, function string) api.TriggerFields
	want   func(ns string) string
}

var sourceRows = []sourceRow{
	{"web", func(_, fn string) api.TriggerFields {
		return api.TriggerFields{Type: ptr.To(api.TriggerHTTP), Function: &fn, RequireAuth: ptr.To(true)}
	}, func(string) string { return "token required" }},
	{"nightly", func(_, fn string) api.TriggerFields {
		return api.TriggerFields{Type: ptr.To(api.TriggerCron), Function: &fn, Schedule: ptr.To("0 3 * * *"),
			Timezone: ptr.To("Europe/Berlin"), PrewarmSeconds: ptr.To[int32](60)}
	}, func(string) string { return "0 3 * * * (Europe/Berlin) · warm 60 s before each tick" }},
	{"orders", func(ns, fn string) api.TriggerFields {
		return api.TriggerFields{Type: ptr.To(api.TriggerEvent), Function: &fn, Queue: ptr.To(ns + ".orders"), BrokerSecret: ptr.To("broker")}
	}, func(ns string) string { return "queue " + ns + ".orders" }},
}

// RunTriggerSources creates a trigger of each kind for function in namespace ns through c and
// checks that every answer of the trigger routes (create, get, list, update) carries its
// kind's status.source.
func RunTriggerSources(t *testing.T, c *client.Client, ns, function string) {
	t.Helper()
	ctx := context.Background()
	check := func(how string, tr api.Trigger, row sourceRow) {
		t.Helper()
		if want := row.want(ns); tr.Status.Source != triggers.Source(tr) || !strings.HasSuffix(tr.Status.Source, want) {
			t.Errorf("%s %s: status.source %q, want its kind's %q (ending %q)", how, tr.Name, tr.Status.Source, triggers.Source(tr), want)
		}
	}
	for _, row := range sourceRows {
		tr, err := c.CreateTrigger(ctx, ns, api.CreateTrigger{Name: row.name, TriggerFields: row.fields(ns, function)})
		if err != nil {
			t.Fatalf("create %s: %v", row.name, err)
		}
		check("created", tr, row)
		if tr, err = c.GetTrigger(ctx, ns, row.name); err != nil {
			t.Fatalf("get %s: %v", row.name, err)
		}
		check("got", tr, row)
		if tr, err = c.SetTriggerEnabled(ctx, ns, row.name, false); err != nil {
			t.Fatalf("disable %s: %v", row.name, err)
		}
		check("updated", tr, row)
	}
	list, err := c.ListTriggers(ctx, ns)
	if err != nil || len(list) != len(sourceRows) {
		t.Fatalf("list = %+v, %v; want %d triggers", list, err, len(sourceRows))
	}
	for _, tr := range list {
		for _, row := range sourceRows {
			if row.name == tr.Name {
				check("listed", tr, row)
			}
		}
	}
}
