package rules_test

import (
	"testing"

	"sless.dev/sless/rules"
	"sless.dev/sless/rules/rulestest"
)

// TestDeriveReadiness runs the table both control planes' tests run (rulestest) through the
// rule itself.
func TestDeriveReadiness(t *testing.T) {
	for _, tc := range rulestest.ReadinessTable(t) {
		t.Run(tc.Name, func(t *testing.T) {
			r := rules.DeriveReadiness(tc.Steps...)
			ready, msg := rules.FunctionView(r.Phase, r.Blocking.Message, tc.Generation, tc.ObservedGeneration)
			if ready != tc.Want.Ready || r.Phase != tc.Want.Phase || r.Blocking.Reason != tc.Want.Reason || msg != tc.Want.Message {
				t.Errorf("got ready %v, phase %q, reason %q, message %q; want %+v", ready, r.Phase, r.Blocking.Reason, msg, tc.Want)
			}
		})
	}
}
