package cluster

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/gateway/backend/backendtest"
	"sless.dev/sless/rules"
	"sless.dev/sless/rules/rulestest"
)

// TestReadinessTable: a Function whose conditions stand as a row's steps shows, once the
// operator has derived Ready from them, what the row wants — the table devplane runs too.
func TestReadinessTable(t *testing.T) {
	rulestest.RunReadiness(t, func(t *testing.T, row rulestest.Readiness) rulestest.View {
		fn := &v1alpha1.Function{}
		fn.Generation = row.Generation
		for _, s := range row.Steps {
			switch s.State {
			case rules.StepUnknown:
			case rules.StepDone:
				fn.Status.MarkCondition(row.ObservedGeneration, s.Name, metav1.ConditionTrue, s.Reason, s.Message)
			default:
				fn.Status.MarkCondition(row.ObservedGeneration, s.Name, metav1.ConditionFalse, s.Reason, s.Message)
			}
		}
		fn.Status.DeriveReady(row.ObservedGeneration, "")
		fn.Status.ObservedGeneration = row.ObservedGeneration
		if c := meta.FindStatusCondition(fn.Status.Conditions, v1alpha1.ConditionReady); row.Want.Reason != "" && c.Reason != row.Want.Reason {
			t.Errorf("Ready reason %q, want %q", c.Reason, row.Want.Reason)
		}
		st := functionOf(fn).Status
		return rulestest.View{Ready: st.Ready, Phase: st.Phase, Message: st.Message}
	})
}

// TestRouteTable: the route /fn/ takes for a Function and its http triggers, with its Async
// condition True while a dispatcher drains — the table devplane runs too.
func TestRouteTable(t *testing.T) {
	backendtest.RunRoutes(t, true, func(t *testing.T, row backendtest.Route) backend.Route {
		fn := &v1alpha1.Function{}
		fn.Status.RoutingHost, fn.Spec.TimeoutSeconds, fn.Spec.StreamIdleTimeoutSeconds, fn.Spec.MemoryMB = row.Host, row.TimeoutSec, row.StreamIdleSec, row.MemoryMB
		fn.Spec.Async.Enabled, fn.Spec.Async.Retry.MaxAttempts = row.Async.Enabled, row.Async.MaxAttempts
		if row.Async.Draining {
			fn.Status.MarkCondition(0, v1alpha1.ConditionAsync, metav1.ConditionTrue, "Draining", "")
		}
		triggers := []v1alpha1.Trigger{{Spec: v1alpha1.TriggerSpec{Type: v1alpha1.TriggerCron}}} // not an http trigger: no gate
		for _, h := range row.Triggers {
			triggers = append(triggers, v1alpha1.Trigger{Spec: v1alpha1.TriggerSpec{Type: v1alpha1.TriggerHTTP, Enabled: &h.Enabled, RequireAuth: h.RequireAuth}})
		}
		return routeOf(fn, triggers)
	})
}
