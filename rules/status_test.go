package rules_test

import (
	"testing"

	"sless.dev/sless/rules"
	"sless.dev/sless/rules/rulestest"
)

// TestDeriveReadiness runs the table both control planes' tests run (rulestest) through the
// rule itself, and checks the reason each row names.
func TestDeriveReadiness(t *testing.T) {
	rulestest.RunReadiness(t, func(t *testing.T, row rulestest.Readiness) rulestest.View {
		r := rules.DeriveReadiness(row.Steps...)
		if r.Blocking.Reason != row.Want.Reason {
			t.Errorf("reason %q, want %q", r.Blocking.Reason, row.Want.Reason)
		}
		ready, msg := rules.FunctionView(r.Phase, r.Blocking.Message, row.Generation, row.ObservedGeneration)
		return rulestest.View{Ready: ready, Phase: r.Phase, Message: msg}
	})
}
