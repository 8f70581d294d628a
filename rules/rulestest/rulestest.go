// Package rulestest holds the tables both control planes' tests run, so that the cluster
// and `sless dev` cannot disagree about a function's Ready or phase, or about which calls
// move a rollout, and the vectors that hold the signer of calls and the wrappers'
// verifiers equal.
package rulestest

import (
	_ "embed"
	"encoding/json"
	"testing"

	"sless.dev/sless/rules"
)

//go:embed readiness.json
var readinessJSON []byte

//go:embed rollout.json
var rolloutJSON []byte

// IdentityJSON is identity.json, the signed-call vectors: the Go signer's test and every
// wrapper's verifier (the Python and Node ones read the file itself) run it.
//
//go:embed identity.json
var IdentityJSON []byte

// Readiness is a function whose steps stand as Steps, seen at Generation with its status of
// ObservedGeneration, and what the API shows for it.
type Readiness struct {
	Name                           string
	Generation, ObservedGeneration int64
	Steps                          []rules.Step
	Want                           struct {
		Ready                  bool
		Phase, Reason, Message string
	}
}

type step struct {
	Name, State, Reason, Message string
}

var states = map[string]rules.StepState{"unknown": rules.StepUnknown, "waiting": rules.StepWaiting,
	"building": rules.StepBuilding, "failed": rules.StepFailed, "done": rules.StepDone}

// ReadinessTable is readiness.json, each row's steps filled up to Built, Deployed and
// Healthy (a step it leaves out is not known yet) and its generations defaulted to 1.
func ReadinessTable(t testing.TB) []Readiness {
	t.Helper()
	var rows []struct {
		Readiness
		Steps []step
	}
	if err := json.Unmarshal(readinessJSON, &rows); err != nil {
		t.Fatalf("readiness.json: %v", err)
	}
	out := make([]Readiness, len(rows))
	for i, r := range rows {
		out[i] = r.Readiness
		if out[i].Generation == 0 {
			out[i].Generation, out[i].ObservedGeneration = 1, 1
		}
		given := map[string]step{}
		for _, s := range r.Steps {
			if _, ok := states[s.State]; !ok {
				t.Fatalf("readiness.json %q: step %s has state %q", r.Name, s.Name, s.State)
			}
			given[s.Name] = s
		}
		for _, name := range []string{rules.StepBuilt, rules.StepDeployed, rules.StepHealthy} {
			s := given[name]
			out[i].Steps = append(out[i].Steps, rules.Step{Name: name, State: states[s.State], Reason: s.Reason, Message: s.Message})
		}
	}
	return out
}

// View is what an API view shows of a function: its Ready, phase and message.
type View struct {
	Ready          bool
	Phase, Message string
}

// RunReadiness runs every row of ReadinessTable through view, one control plane's way from a
// function's steps to its API view, and checks it against the row.
func RunReadiness(t *testing.T, view func(t *testing.T, row Readiness) View) {
	for _, row := range ReadinessTable(t) {
		t.Run(row.Name, func(t *testing.T) {
			got, w := view(t, row), row.Want
			if got != (View{w.Ready, w.Phase, w.Message}) {
				t.Errorf("got %+v; want %+v", got, w)
			}
		})
	}
}

// RolloutOutcome is a call answered with HTTPStatus (0: none) and how it counts toward its
// revision's rollout.
type RolloutOutcome struct {
	Name       string
	HTTPStatus int
	Want       rules.Outcome
}

var outcomes = map[string]rules.Outcome{"succeeded": rules.OutcomeSucceeded, "failed": rules.OutcomeFailed, "ignored": rules.OutcomeIgnored}

// RolloutOutcomeTable is rollout.json.
func RolloutOutcomeTable(t testing.TB) []RolloutOutcome {
	t.Helper()
	var rows []struct {
		Name       string
		HTTPStatus int
		Want       string
	}
	if err := json.Unmarshal(rolloutJSON, &rows); err != nil {
		t.Fatalf("rollout.json: %v", err)
	}
	out := make([]RolloutOutcome, len(rows))
	for i, r := range rows {
		want, ok := outcomes[r.Want]
		if !ok {
			t.Fatalf("rollout.json %q: want %q is none of succeeded, failed, ignored", r.Name, r.Want)
		}
		out[i] = RolloutOutcome{Name: r.Name, HTTPStatus: r.HTTPStatus, Want: want}
	}
	return out
}

// Identity is identity.json: a function's clock, the keys (hex) by name, the cases and one
// key derivation.
type Identity struct {
	Now        int64
	Keys       map[string]string
	Cases      []IdentityCase
	Derivation struct{ Master, Namespace, Function, Key string }
}

// IdentityCase is one request to a function holding Keys[Key] ("" none), the headers as
// sent, what its signature was made over (nil when it has none made by the signer) and
// Want: "ok" or the verifier's reason for refusing it.
type IdentityCase struct {
	Name, Key, Method, Path string
	Headers                 [][2]string
	Signed                  *struct {
		Key, Method, Path string
		T                 int64
		Headers           [][2]string
	}
	Want string
}

// IdentityTable is identity.json.
func IdentityTable(t testing.TB) Identity {
	t.Helper()
	var id Identity
	if err := json.Unmarshal(IdentityJSON, &id); err != nil {
		t.Fatalf("identity.json: %v", err)
	}
	return id
}
