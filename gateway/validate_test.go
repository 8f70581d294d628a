package gateway

import (
	"errors"
	"strings"
	"testing"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
)

// TestValidEntrypointSaysTheRuntimesForm: create and update refuse an entrypoint with the
// message the upload gives (buildkit's, naming the runtime's form), never a suggestion of
// another runtime's form.
func TestValidEntrypointSaysTheRuntimesForm(t *testing.T) {
	for _, tc := range []struct {
		runtime, ep, want string
	}{
		{"go1.25", "Handle()", "such as Handle"},
		{"go1.23", "handler.Handle(event)", "such as Handle"},
		{"go1.25", "main.Handle", "such as Handle"},
		{"go1.25", strings.Repeat("H", 254), "such as Handle"},
		{"python3.11", "handler.handle()", "such as handler.handle"},
		{"python3.12", "handler", "such as handler.handle"},
		{"nodejs20", "handler.handle;x", "such as handler.handle or src/index.handle"},
		{"nodejs22", "1index.handle", "such as handler.handle or src/index.handle"},
	} {
		spec := defaultFunctionSpec()
		spec.Runtime, spec.Entrypoint = tc.runtime, tc.ep
		err := validateFunctionSpec(spec)
		var ie *backend.InvalidError
		if !errors.As(err, &ie) || ie.Field != "entrypoint" {
			t.Errorf("%s %q: %v, want an invalid entrypoint", tc.runtime, tc.ep, err)
			continue
		}
		_, upload := buildkit.ValidateBytes(t.Context(), nil, tc.runtime, tc.ep, buildkit.Limits{})
		if upload == nil || ie.Reason != upload.Error() || !strings.Contains(ie.Reason, tc.want) {
			t.Errorf("%s %q: create says %q, the upload %v; want the same, with %q", tc.runtime, tc.ep, ie.Reason, upload, tc.want)
		}
	}
}

// TestQueuesAreTheTenants is attack 4 of issue 24 on the rule both planes share: every queue
// name a tenant sets starts with its namespace, at create and at update.
func TestQueuesAreTheTenants(t *testing.T) {
	const ns = "sless-team"
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name, field string
		apply       func() error
	}{
		{"async dead letters of another tenant", "async.dead_letter_queue", func() error {
			spec := defaultFunctionSpec()
			return functionResource.apply(ns, "f", &spec, api.FunctionFields{Runtime: str("go1.25"), Async: &api.AsyncFields{DeadLetterQueue: str("sless-victim.async.f")}})
		}},
		{"async dead letters that only share the prefix's letters", "async.dead_letter_queue", func() error {
			spec := defaultFunctionSpec()
			return functionResource.apply(ns, "f", &spec, api.FunctionFields{Runtime: str("go1.25"), Async: &api.AsyncFields{DeadLetterQueue: str(ns + "x.dlq")}})
		}},
		{"event queue of another tenant", "queue", func() error {
			spec := defaultTriggerSpec(api.TriggerEvent)
			return triggerResource.apply(ns, "t", &spec, api.TriggerFields{Function: str("f"), Queue: str("orders"), BrokerSecret: str("amqp")})
		}},
		{"event dead letters of another tenant", "dead_letter_queue", func() error {
			spec := defaultTriggerSpec(api.TriggerEvent)
			return triggerResource.apply(ns, "t", &spec, api.TriggerFields{Function: str("f"), Queue: str(ns + ".orders"), BrokerSecret: str("amqp"), DeadLetterQueue: str("shared.dlq")})
		}},
		{"the tenant's own queues", "", func() error {
			spec := defaultTriggerSpec(api.TriggerEvent)
			if err := triggerResource.apply(ns, "t", &spec, api.TriggerFields{Function: str("f"), Queue: str(ns + ".orders"), BrokerSecret: str("amqp"), DeadLetterQueue: str(ns + ".orders.dlq")}); err != nil {
				return err
			}
			fn := defaultFunctionSpec()
			return functionResource.apply(ns, "f", &fn, api.FunctionFields{Runtime: str("go1.25"), Async: &api.AsyncFields{DeadLetterQueue: str(ns + ".failed")}})
		}},
	} {
		err := tc.apply()
		var ie *backend.InvalidError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.field != "" && (!errors.As(err, &ie) || ie.Field != tc.field || !strings.Contains(ie.Reason, ns+".<name>")):
			t.Errorf("%s: %v, want a 400 on %s naming %s.<name>", tc.name, err, tc.field, ns)
		}
	}
}
