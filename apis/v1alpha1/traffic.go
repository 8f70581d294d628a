package v1alpha1

import (
	"slices"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/rules"
)

// The traffic and rollout fields as the rules take them (rules/traffic.go, rules/rollout.go),
// for the operator and the gateway alike.

// TrafficRules is the function's traffic (the default when unset).
func (s *FunctionSpec) TrafficRules() []rules.TrafficTarget {
	if len(s.Traffic) == 0 {
		return rules.DefaultTraffic()
	}
	out := make([]rules.TrafficTarget, len(s.Traffic))
	for i, t := range s.Traffic {
		out[i] = rules.TrafficTarget(t)
	}
	return out
}

// ResolvedRules is resolved traffic as the rules take it (nil for none).
func ResolvedRules(ts []ResolvedTrafficTarget) []rules.ResolvedTarget {
	var out []rules.ResolvedTarget
	for _, t := range ts {
		out = append(out, rules.ResolvedTarget(t))
	}
	return out
}

// ResolvedStatus is resolved traffic as the status holds it (nil for none).
func ResolvedStatus(ts []rules.ResolvedTarget) []ResolvedTrafficTarget {
	var out []ResolvedTrafficTarget
	for _, t := range ts {
		out = append(out, ResolvedTrafficTarget(t))
	}
	return out
}

// Policy is the rollout policy as the rules take it (nil for none).
func (p *RolloutSpec) Policy() *rules.Rollout {
	if p == nil {
		return nil
	}
	rate, _ := strconv.ParseFloat(p.MaxErrorRate, 64) // the CRD's pattern admits decimals only
	return &rules.Rollout{Steps: slices.Clone(p.Steps), IntervalSec: p.IntervalSeconds, MaxErrorRate: rate, MinRequests: p.MinRequests}
}

// RolloutSpecOf is a rollout policy as the spec holds it (nil for none).
func RolloutSpecOf(p *rules.Rollout) *RolloutSpec {
	if p == nil {
		return nil
	}
	return &RolloutSpec{Steps: slices.Clone(p.Steps), IntervalSeconds: p.IntervalSec,
		MaxErrorRate: strconv.FormatFloat(p.MaxErrorRate, 'f', -1, 64), MinRequests: p.MinRequests}
}

// State is where the rollout stands, as the rules take it (nil for none).
func (s *RolloutStatus) State() *rules.RolloutState {
	if s == nil {
		return nil
	}
	return &rules.RolloutState{Revision: s.Revision, Previous: s.Previous, Phase: s.Phase, Step: int(s.Step), Percent: s.Percent,
		StepStarted: s.StepStarted.UTC(), Requests: s.Requests, Errors: s.Errors, Message: s.Message}
}

// RolloutStatusOf is where a rollout stands, as the status holds it (nil for none).
func RolloutStatusOf(s *rules.RolloutState) *RolloutStatus {
	if s == nil {
		return nil
	}
	return &RolloutStatus{Revision: s.Revision, Previous: s.Previous, Phase: s.Phase, Step: int32(s.Step), Percent: s.Percent,
		StepStarted: metav1.NewTime(s.StepStarted), Requests: s.Requests, Errors: s.Errors, Message: s.Message}
}
