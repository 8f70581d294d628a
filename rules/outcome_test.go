package rules_test

import (
	"testing"

	"sless.dev/sless/rules"
	"sless.dev/sless/rules/rulestest"
)

// TestRolloutOutcome runs the table both history stores are held to (rulestest/rollout.json):
// only the function's own outcomes move a rollout, never a caller that went away, a body
// that did not arrive or any 4xx.
func TestRolloutOutcome(t *testing.T) {
	for _, row := range rulestest.RolloutOutcomeTable(t) {
		if got := rules.RolloutOutcome(row.HTTPStatus); got != row.Want {
			t.Errorf("%s (%d): %v, want %v", row.Name, row.HTTPStatus, got, row.Want)
		}
	}
}

// TestReservedPath: the wrappers' own path is reserved in every form a wrapper or a cleaning
// server would read as it; the function's other paths are not.
func TestReservedPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/healthz": true, "/healthz/": true, "//healthz": true, "/./healthz": true, "/x/../healthz": true, "healthz": true,
		"/": false, "/healthz2": false, "/healthz/x": false, "/api/healthz": false, "/HEALTHZ": false, "": false,
	} {
		if got := rules.ReservedPath(p); got != want {
			t.Errorf("ReservedPath(%q) = %v, want %v", p, got, want)
		}
	}
}
