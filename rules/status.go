package rules

// Phases of a function: the one-word summary of its Ready that both API views show.
const (
	PhasePending  = "Pending"
	PhaseBuilding = "Building"
	PhaseReady    = "Ready"
	PhaseFailed   = "Failed"
)

// The steps of a function on its way to Ready, in the order their failures are reported;
// the cluster's Function has a condition of each name.
const (
	StepBuilt    = "Built"
	StepDeployed = "Deployed"
	StepHealthy  = "Healthy"
)

// StepState is where one step on a function's way to Ready stands.
type StepState int

const (
	StepUnknown  StepState = iota // not reported yet
	StepWaiting                   // on the way: no source yet, a deploy retried, nothing to deploy yet
	StepBuilding                  // the current source builds
	StepFailed                    // failed: the source does not build, the image cannot run, a write failed
	StepDone
)

// Step is one dependent of a function's Ready (its build, its deploy, its health), as each
// control plane observes it: the cluster from the Function's conditions, `sless dev` from its
// own build and process pool.
type Step struct {
	Name            string
	State           StepState
	Reason, Message string
}

// Readiness is a function's Ready and phase, derived from its steps.
type Readiness struct {
	Ready bool
	Phase string
	// Blocking is the first step that is not done (the zero Step when Ready): its reason and
	// message are the function's.
	Blocking Step
}

// DeriveReadiness is how both control planes derive a function's Ready and phase from its
// steps, in the order their failures are reported (Knative's living condition set): Ready
// when every step is done; else the first that is not decides — Building while the current
// source builds, Failed when it failed, else Pending. A stage on the way, such as a deploy
// retried after a write conflict, is never Failed.
func DeriveReadiness(steps ...Step) Readiness {
	for _, s := range steps {
		switch s.State {
		case StepDone:
			continue
		case StepUnknown:
			if s.Reason == "" {
				s.Reason, s.Message = "Unknown", s.Name+" is not known yet"
			}
			return Readiness{Phase: PhasePending, Blocking: s}
		case StepBuilding:
			return Readiness{Phase: PhaseBuilding, Blocking: s}
		case StepFailed:
			return Readiness{Phase: PhaseFailed, Blocking: s}
		default:
			return Readiness{Phase: PhasePending, Blocking: s}
		}
	}
	return Readiness{Ready: true, Phase: PhaseReady}
}

// FunctionView is a function's Ready and status message as both API views show them: Ready
// only for its current generation, and a message of an older one replaced (CurrentMessage).
func FunctionView(phase, message string, generation, observedGeneration int64) (ready bool, msg string) {
	return FunctionReady(phase == PhaseReady, generation, observedGeneration), CurrentMessage(message, generation, observedGeneration)
}
