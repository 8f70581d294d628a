package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/rules"
)

// A Function's Ready is derived from the conditions in FunctionReadyDependents (Knative's
// living condition set): True when all of them are, else False with the reason and message
// of the first that is not. The operator sets the dependents; nothing sets Ready by hand.

// ConditionHealthy says whether the Function's pods can run its image (no pull errors, no
// crash loop).
const ConditionHealthy = rules.StepHealthy

// FunctionReadyDependents are the conditions Ready is derived from, in the order their
// failures are reported.
var FunctionReadyDependents = []string{ConditionBuilt, ConditionDeployed, ConditionHealthy}

// Reasons of Function conditions.
const (
	// Built
	ReasonAwaitingSource      = "AwaitingSource"      // no source uploaded yet
	ReasonBuilding            = "Building"            // a kaniko Job builds the current source
	ReasonBuilt               = "Built"               // the current source's image exists
	ReasonPrebuilt            = "Prebuilt"            // spec.image: nothing to build; its tag resolved to a digest
	ReasonImageUnresolvable   = "ImageUnresolvable"   // spec.image cannot be fetched from its registry; retried
	ReasonImageNotAllowed     = "ImageNotAllowed"     // spec.image is outside what the operator lets the namespace run
	ReasonBuildFailed         = "BuildFailed"         // the source does not build; a new upload retries
	ReasonBuildError          = "BuildError"          // the build could not be started or read
	ReasonRegistryUnavailable = "RegistryUnavailable" // the build cannot reach a registry; retried
	// Deployed
	ReasonNoImage        = "NoImage"        // nothing to deploy yet
	ReasonDeployed       = "Deployed"       // Deployment, Service and HTTPScaledObject up to date
	ReasonDeployFailed   = "DeployFailed"   // writing them failed
	ReasonSecretNotFound = "SecretNotFound" // a referenced secret or key does not exist
	// Healthy (False carries the kubelet's waiting reason: ErrImagePull, CrashLoopBackOff, …)
	ReasonPodsHealthy = "PodsHealthy"
	ReasonNotDeployed = "NotDeployed"
	// Ready
	ReasonReady = "Ready"
	// Async (not a dependent of Ready: a function serves HTTP without it)
	ReasonAsyncDraining      = "Draining"
	ReasonAsyncNotConfigured = "NotConfigured"
)

// MarkCondition sets condition t of the status as of generation gen; its transition time
// moves only when the status flips.
func (s *FunctionStatus) MarkCondition(gen int64, t string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// DeriveReady sets Ready from FunctionReadyDependents (readyMsg when all are True) and the
// phase, by the rule both control planes share (rules.DeriveReadiness).
func (s *FunctionStatus) DeriveReady(gen int64, readyMsg string) {
	steps := make([]rules.Step, len(FunctionReadyDependents))
	for i, t := range FunctionReadyDependents {
		steps[i] = stepOf(t, meta.FindStatusCondition(s.Conditions, t))
	}
	r := rules.DeriveReadiness(steps...)
	switch {
	case r.Ready:
		s.MarkCondition(gen, ConditionReady, metav1.ConditionTrue, ReasonReady, readyMsg)
	case r.Blocking.State == rules.StepUnknown:
		s.MarkCondition(gen, ConditionReady, metav1.ConditionUnknown, r.Blocking.Reason, r.Blocking.Message)
	default:
		s.MarkCondition(gen, ConditionReady, metav1.ConditionFalse, r.Blocking.Reason, r.Blocking.Message)
	}
	s.Phase = FunctionPhase(r.Phase)
}

// stepOf reads condition t as a step towards Ready: a False one is Building while the
// current source builds, Failed when its reason is a Failure, else on the way.
func stepOf(t string, c *metav1.Condition) rules.Step {
	if c == nil {
		return rules.Step{Name: t, State: rules.StepUnknown}
	}
	st := rules.Step{Name: t, Reason: c.Reason, Message: c.Message}
	switch {
	case c.Status == metav1.ConditionTrue:
		st.State = rules.StepDone
	case c.Reason == ReasonBuilding:
		st.State = rules.StepBuilding
	case Failure(c.Reason):
		st.State = rules.StepFailed
	default:
		st.State = rules.StepWaiting
	}
	return st
}

// Failure reports whether a False condition with this reason is a failure (a Warning event)
// rather than a stage on the way to Ready.
func Failure(reason string) bool {
	switch reason {
	case ReasonAwaitingSource, ReasonBuilding, ReasonNoImage, ReasonNotDeployed, "Unknown":
		return false
	}
	return true
}

// Reasons of a Trigger's Ready condition.
const (
	ReasonFunctionNotFound = "FunctionNotFound"
	ReasonFunctionNotReady = "FunctionNotReady"
	ReasonActive           = "Active"
	ReasonDisabled         = "Disabled"
	ReasonRenderFailed     = "RenderFailed"
)

// Reasons of a FunctionJob's Succeeded condition (besides ReasonAwaitingSource,
// ReasonBuilding, ReasonBuildFailed and ReasonImageNotAllowed, shared with Functions).
const (
	ReasonSkipped            = "Skipped"
	ReasonWaitingForFunction = "WaitingForFunction"
	ReasonRunning            = "Running"
	ReasonSucceeded          = "Succeeded"
	ReasonRunFailed          = "RunFailed"
)
