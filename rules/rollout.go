package rules

import (
	"fmt"
	"slices"
	"time"
)

// A health-gated rollout: a new ready revision takes the share of the traffic that follows
// latest in steps, each held for an interval in which its own error rate (from the
// invocation history) must stay at or below a limit; above it, the previous revision takes
// that share back at once and the rollout stops.

// Limits of a rollout.
const (
	MaxRolloutSteps       = 10
	MaxRolloutIntervalSec = 86400
	MaxRolloutMinRequests = 1000000
)

// Rollout phases.
const (
	RolloutProgressing = "progressing"
	RolloutComplete    = "complete"
	RolloutRolledBack  = "rolled_back"
)

// Rollout is a function's rollout policy.
type Rollout struct {
	// Steps are the new revision's shares (percent of what follows latest), rising, the
	// last 100.
	Steps       []int32 `json:"steps"`
	IntervalSec int32   `json:"interval_sec"`
	// MaxErrorRate is the highest share of failed calls a step may see, MinRequests the
	// calls a step needs before its rate counts; which calls count, and as what, is
	// RolloutOutcome's.
	MaxErrorRate float64 `json:"max_error_rate"`
	MinRequests  int32   `json:"min_requests"`
}

// CheckRollout checks a rollout policy; fields are named under rollout.
func CheckRollout(r Rollout) *FieldError {
	switch {
	case len(r.Steps) == 0 || len(r.Steps) > MaxRolloutSteps:
		return &FieldError{"rollout.steps", fmt.Sprintf("give 1 to %d rising percents ending at 100, e.g. [10, 50, 100]", MaxRolloutSteps)}
	case r.Steps[len(r.Steps)-1] != 100:
		return &FieldError{"rollout.steps", fmt.Sprintf("the last step is %d; it must be 100", r.Steps[len(r.Steps)-1])}
	case r.IntervalSec < 1 || r.IntervalSec > MaxRolloutIntervalSec:
		return &FieldError{"rollout.interval_sec", fmt.Sprintf("%d is out of range; use 1 to %d", r.IntervalSec, MaxRolloutIntervalSec)}
	case r.MaxErrorRate < 0 || r.MaxErrorRate > 1:
		return &FieldError{"rollout.max_error_rate", fmt.Sprintf("%g is out of range; use 0 to 1 (0.05 is 5 %%)", r.MaxErrorRate)}
	case r.MinRequests < 0 || r.MinRequests > MaxRolloutMinRequests:
		return &FieldError{"rollout.min_requests", fmt.Sprintf("%d is out of range; use 0 to %d", r.MinRequests, MaxRolloutMinRequests)}
	}
	for i, s := range r.Steps {
		if s < 1 || s > 100 || i > 0 && s <= r.Steps[i-1] {
			return &FieldError{"rollout.steps", fmt.Sprintf("step %d (%d) must be above the one before and within 1 to 100", i, s)}
		}
	}
	return nil
}

// RolloutState is where a rollout stands: Revision takes over from Previous, at Steps[Step]
// since StepStarted.
type RolloutState struct {
	Revision    string    `json:"revision"`
	Previous    string    `json:"previous"`
	Phase       string    `json:"phase"`
	Step        int       `json:"step"`
	Percent     int32     `json:"percent"`
	StepStarted time.Time `json:"step_started"`
	// Requests and Errors are what the current step has seen; Message says what happens next
	// or, rolled back, why.
	Requests int64  `json:"requests"`
	Errors   int64  `json:"errors"`
	Message  string `json:"message,omitempty"`
}

// StartRollout begins the rollout of revision after previous served.
func StartRollout(p Rollout, revision, previous string, now time.Time) RolloutState {
	st := RolloutState{Revision: revision, Previous: previous, Phase: RolloutProgressing, Percent: p.Steps[0], StepStarted: now}
	if p.Steps[0] == 100 {
		st.Phase = RolloutComplete
	}
	st.Message = st.describe(p)
	return st
}

// NextRollout is where a function's rollout stands now (nil without policy p), from st, its
// stored state: a revision that just became ready (latestReady, where previousReady served)
// starts one from the revision that served before; one in progress is judged by outcomes,
// the calls its revision answered since its step began, or holds while outcomes says why
// it cannot be judged (hold). rolledBack says this judgement rolled it back. Time is kept
// in whole seconds, as a Kubernetes status stores it.
func NextRollout(p *Rollout, st *RolloutState, latestReady, previousReady string, now time.Time,
	outcomes func(revision string, since time.Time) (requests, errors int64, hold string)) (next *RolloutState, rolledBack bool) {
	if p == nil {
		return nil, false
	}
	now = now.UTC().Truncate(time.Second)
	if latestReady != "" && previousReady != "" && latestReady != previousReady && (st == nil || st.Revision != latestReady) {
		previous := previousReady
		if st != nil && st.Phase != RolloutComplete {
			previous = st.Previous // the one that served before that rollout
		}
		started := StartRollout(*p, latestReady, previous, now)
		return &started, false
	}
	if st == nil || st.Phase != RolloutProgressing {
		return st, false
	}
	judged := *st
	requests, errors, hold := outcomes(st.Revision, st.StepStarted)
	if hold != "" {
		judged.Message = "holding: " + hold
		return &judged, false
	}
	judged = AdvanceRollout(*p, *st, requests, errors, now)
	return &judged, judged.Phase == RolloutRolledBack
}

// AdvanceRollout judges the current step by the calls the new revision answered since it
// began (requests, of which errors failed): above the limit (once MinRequests were seen)
// it rolls back at once; after the interval within it, the next step. A step that has not
// seen MinRequests calls is held until it has.
func AdvanceRollout(p Rollout, st RolloutState, requests, errors int64, now time.Time) RolloutState {
	if st.Phase != RolloutProgressing {
		return st
	}
	st.Requests, st.Errors = requests, errors
	enough := requests >= int64(p.MinRequests) && requests > 0
	switch {
	case enough && float64(errors)/float64(requests) > p.MaxErrorRate:
		st.Phase = RolloutRolledBack
		st.Message = fmt.Sprintf("rolled back from %s to %s: error rate %.2f (%d of %d calls) above %.2f at %d %%",
			st.Revision, st.Previous, float64(errors)/float64(requests), errors, requests, p.MaxErrorRate, st.Percent)
		return st
	case now.Sub(st.StepStarted) < time.Duration(p.IntervalSec)*time.Second || !enough && p.MinRequests > 0:
		st.Message = st.describe(p)
		return st
	}
	st.Step = min(st.Step+1, len(p.Steps)-1)
	st.Percent, st.StepStarted, st.Requests, st.Errors = p.Steps[st.Step], now, 0, 0
	if st.Percent == 100 {
		st.Phase = RolloutComplete
	}
	st.Message = st.describe(p)
	return st
}

func (st RolloutState) describe(p Rollout) string {
	if st.Phase == RolloutComplete {
		return fmt.Sprintf("%s has all of latest's traffic", st.Revision)
	}
	return fmt.Sprintf("%s at %d %% of latest's traffic since %s (%d calls, %d failed); the next step after %ds with %d calls at most %.2f failed",
		st.Revision, st.Percent, st.StepStarted.UTC().Format(time.RFC3339), st.Requests, st.Errors, p.IntervalSec, p.MinRequests, p.MaxErrorRate)
}

// Outcome is what one recorded call of a revision says about it to its rollout.
type Outcome int

const (
	// OutcomeIgnored: no verdict on the function. A 4xx is the caller's mistake or a refusal
	// of it (the function's own or the gateway's: 408 for a body that did not arrive, 499 for
	// a caller that went away); the gateway's other refusals (its caps' 429 and 503, 401,
	// 403, 404 and the platform's reserved paths) never reach a function and are never
	// recorded. Anyone may cause these, so they cannot move a rollout.
	OutcomeIgnored Outcome = iota
	// OutcomeSucceeded: the function answered 1xx (an upgrade), 2xx or 3xx.
	OutcomeSucceeded
	// OutcomeFailed: the function answered 5xx (its wrapper's 500 for an error and 504 for
	// its timeout included), could not be reached (502) or did not answer in time (the
	// gateway's 504), or, for a call with no HTTP answer at all (0: a dispatcher's call that
	// failed or ran out of time), did not answer.
	OutcomeFailed
)

// RolloutOutcome is how a call answered with httpStatus counts toward a rollout: only the
// function's own outcomes do. Both history stores count by it (history.Reader.RevisionOutcomes),
// so both planes' rollouts judge alike.
func RolloutOutcome(httpStatus int) Outcome {
	switch {
	case httpStatus >= 500 || httpStatus < 100:
		return OutcomeFailed
	case httpStatus >= 400:
		return OutcomeIgnored
	default:
		return OutcomeSucceeded
	}
}

// LatestDuringRollout is the revision latest resolves to: the previous one while the newest
// ready revision is the one a rollout rolled back.
func LatestDuringRollout(latestReady string, st *RolloutState) string {
	if st != nil && st.Phase == RolloutRolledBack && st.Revision == latestReady {
		return st.Previous
	}
	return latestReady
}

// ApplyRollout splits each entry of resolved that follows latest between the rolling
// revision (its step's share) and the previous one (the rest); a tag on such an entry stays
// with the new revision.
func ApplyRollout(resolved []ResolvedTarget, st *RolloutState) []ResolvedTarget {
	if st == nil || st.Phase != RolloutProgressing {
		return resolved
	}
	out := make([]ResolvedTarget, 0, len(resolved)+1)
	for _, t := range resolved {
		if !t.Latest || t.Revision != st.Revision {
			out = append(out, t)
			continue
		}
		newShare := t.Percent * st.Percent / 100
		out = append(out, ResolvedTarget{Revision: st.Revision, Latest: true, Percent: newShare, Tag: t.Tag})
		if old := t.Percent - newShare; old > 0 {
			out = append(out, ResolvedTarget{Revision: st.Previous, Latest: true, Percent: old})
		}
	}
	return slices.Clip(out)
}
