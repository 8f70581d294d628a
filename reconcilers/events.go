package reconcilers

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	v1 "sless.dev/sless/apis/v1alpha1"
)

// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// eventActions names what each of a Function's Ready dependents is about, as an Event's
// action.
var eventActions = map[string]string{v1.ConditionBuilt: "Build", v1.ConditionDeployed: "Deploy", v1.ConditionHealthy: "Run"}

// conditionStates is each condition's status and reason, to tell transitions from repeats.
func conditionStates(conds []metav1.Condition) map[string]string {
	out := make(map[string]string, len(conds))
	for _, c := range conds {
		out[c.Type] = string(c.Status) + "/" + c.Reason
	}
	return out
}

// recordTransitions emits one Event per Ready dependent of fn whose status or reason changed
// since before (build started, built or failed; deployed or not; pods failing): Warning for a
// failure, Normal otherwise. The steady state changes nothing and so records nothing.
func recordTransitions(rec events.EventRecorder, fn *v1.Function, before map[string]string) {
	if rec == nil {
		return
	}
	for _, t := range v1.FunctionReadyDependents {
		c := meta.FindStatusCondition(fn.Status.Conditions, t)
		if c == nil || before[t] == string(c.Status)+"/"+c.Reason {
			continue
		}
		kind := corev1.EventTypeNormal
		if c.Status == metav1.ConditionFalse && v1.Failure(c.Reason) {
			kind = corev1.EventTypeWarning
		}
		rec.Eventf(fn, nil, kind, c.Reason, eventActions[t], "%s", c.Message)
	}
}
