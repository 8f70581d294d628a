package cluster

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
	"sless.dev/sless/rules/rulestest"
)

// TestReadinessTable: a Function whose conditions stand as a row's steps shows, once the
// operator has derived Ready from them, what the row wants — the table devplane runs too.
func TestReadinessTable(t *testing.T) {
	for _, tc := range rulestest.ReadinessTable(t) {
		t.Run(tc.Name, func(t *testing.T) {
			fn := &v1alpha1.Function{}
			fn.Generation = tc.Generation
			for _, s := range tc.Steps {
				switch s.State {
				case rules.StepUnknown:
				case rules.StepDone:
					fn.Status.MarkCondition(tc.ObservedGeneration, s.Name, metav1.ConditionTrue, s.Reason, s.Message)
				default:
					fn.Status.MarkCondition(tc.ObservedGeneration, s.Name, metav1.ConditionFalse, s.Reason, s.Message)
				}
			}
			fn.Status.DeriveReady(tc.ObservedGeneration, "")
			fn.Status.ObservedGeneration = tc.ObservedGeneration
			got := functionOf(fn).Status
			if got.Ready != tc.Want.Ready || got.Phase != tc.Want.Phase || got.Message != tc.Want.Message {
				t.Errorf("got ready %v, phase %q, message %q; want %+v", got.Ready, got.Phase, got.Message, tc.Want)
			}
			if c := readyCondition(fn); tc.Want.Reason != "" && c.Reason != tc.Want.Reason {
				t.Errorf("Ready reason %q, want %q", c.Reason, tc.Want.Reason)
			}
		})
	}
}

func readyCondition(fn *v1alpha1.Function) metav1.Condition {
	for _, c := range fn.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			return c
		}
	}
	return metav1.Condition{}
}

// TestRouteTable: the route /fn/ takes for a Function and its http triggers, with its Async
// condition True while a dispatcher drains — the table devplane runs too.
func TestRouteTable(t *testing.T) {
	for _, tc := range rulestest.RouteTable(t) {
		t.Run(tc.Name, func(t *testing.T) {
			fn := &v1alpha1.Function{}
			fn.Status.RoutingHost, fn.Spec.TimeoutSeconds = tc.Host, tc.TimeoutSec
			fn.Spec.Async.Enabled, fn.Spec.Async.Retry.MaxAttempts = tc.Async.Enabled, tc.Async.MaxAttempts
			if tc.Async.Draining {
				fn.Status.MarkCondition(0, v1alpha1.ConditionAsync, metav1.ConditionTrue, "Draining", "")
			}
			triggers := []v1alpha1.Trigger{{Spec: v1alpha1.TriggerSpec{Type: v1alpha1.TriggerCron}}} // not an http trigger: no gate
			for _, h := range tc.Triggers {
				triggers = append(triggers, v1alpha1.Trigger{Spec: v1alpha1.TriggerSpec{Type: v1alpha1.TriggerHTTP, Enabled: &h.Enabled, RequireAuth: h.RequireAuth}})
			}
			got := routeOf(fn, triggers)
			w := tc.Want
			if got.Host != w.Host || got.Timeout != time.Duration(w.TimeoutSec)*time.Second || got.RequireAuth != w.RequireAuth || got.Disabled != w.Disabled || got.AsyncAttempts != w.AsyncAttempts {
				t.Errorf("got %+v, want %+v", got, w)
			}
		})
	}
}
