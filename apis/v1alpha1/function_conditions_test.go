package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDeriveReady(t *testing.T) {
	type cond struct {
		t      string
		status metav1.ConditionStatus
		reason string
	}
	ok := func(t, reason string) cond { return cond{t, metav1.ConditionTrue, reason} }
	no := func(t, reason string) cond { return cond{t, metav1.ConditionFalse, reason} }
	for name, tc := range map[string]struct {
		conds       []cond
		ready       metav1.ConditionStatus
		reason      string
		phase       FunctionPhase
		wantMessage string
	}{
		"all true": {[]cond{ok(ConditionBuilt, ReasonBuilt), ok(ConditionDeployed, ReasonDeployed), ok(ConditionHealthy, ReasonPodsHealthy)},
			metav1.ConditionTrue, ReasonReady, FunctionReady, "serving"},
		"awaiting source": {[]cond{no(ConditionBuilt, ReasonAwaitingSource), no(ConditionDeployed, ReasonNoImage)},
			metav1.ConditionFalse, ReasonAwaitingSource, FunctionPending, "msg " + ReasonAwaitingSource},
		"a new source builds while the old image serves": {[]cond{no(ConditionBuilt, ReasonBuilding), ok(ConditionDeployed, ReasonDeployed), ok(ConditionHealthy, ReasonPodsHealthy)},
			metav1.ConditionFalse, ReasonBuilding, FunctionBuilding, "msg " + ReasonBuilding},
		"build failed": {[]cond{no(ConditionBuilt, ReasonBuildFailed), ok(ConditionDeployed, ReasonDeployed), ok(ConditionHealthy, ReasonPodsHealthy)},
			metav1.ConditionFalse, ReasonBuildFailed, FunctionFailed, "msg " + ReasonBuildFailed},
		"deploy failed": {[]cond{ok(ConditionBuilt, ReasonBuilt), no(ConditionDeployed, ReasonDeployFailed)},
			metav1.ConditionFalse, ReasonDeployFailed, FunctionFailed, "msg " + ReasonDeployFailed},
		"pods cannot pull": {[]cond{ok(ConditionBuilt, ReasonBuilt), ok(ConditionDeployed, ReasonDeployed), no(ConditionHealthy, "ImagePullBackOff")},
			metav1.ConditionFalse, "ImagePullBackOff", FunctionFailed, "msg ImagePullBackOff"},
		"built, deployed is stale": {[]cond{ok(ConditionBuilt, ReasonBuilt), no(ConditionDeployed, ReasonNoImage)},
			metav1.ConditionFalse, ReasonNoImage, FunctionPending, "msg " + ReasonNoImage},
		"a dependent not known yet": {[]cond{ok(ConditionBuilt, ReasonBuilt)},
			metav1.ConditionUnknown, "Unknown", FunctionPending, "Deployed is not known yet"},
	} {
		t.Run(name, func(t *testing.T) {
			var s FunctionStatus
			for _, c := range tc.conds {
				s.MarkCondition(4, c.t, c.status, c.reason, "msg "+c.reason)
			}
			s.DeriveReady(4, "serving")
			r := meta.FindStatusCondition(s.Conditions, ConditionReady)
			if r.Status != tc.ready || r.Reason != tc.reason || r.Message != tc.wantMessage || r.ObservedGeneration != 4 || s.Phase != tc.phase {
				t.Fatalf("Ready %s/%s %q (gen %d), phase %s; want %s/%s %q, %s", r.Status, r.Reason, r.Message, r.ObservedGeneration, s.Phase, tc.ready, tc.reason, tc.wantMessage, tc.phase)
			}
		})
	}
}

func TestFailureReasons(t *testing.T) {
	for reason, want := range map[string]bool{ReasonBuilding: false, ReasonAwaitingSource: false, ReasonNoImage: false,
		ReasonBuildFailed: true, ReasonDeployFailed: true, ReasonRegistryUnavailable: true, ReasonImageUnresolvable: true, ReasonImageNotAllowed: true, "CrashLoopBackOff": true} {
		if Failure(reason) != want {
			t.Errorf("Failure(%s) = %t", reason, !want)
		}
	}
}
