package rules

// A revision's phase and what the traffic rules read of it: both control planes settle a
// revision's phase here and hand their revisions to the rules through StatesOf.

// RevisionStatus is where a revision's build and start stand: Phase building, ready or
// failed (Message says why, or what it waits for); Image is what it runs once built.
type RevisionStatus struct {
	Phase   string `json:"phase"`
	Message string `json:"message,omitempty"`
	Image   string `json:"image,omitempty"`
}

// Build states a revision's phase is settled from.
const (
	BuildPending   = "pending" // no build started yet
	BuildRunning   = "running"
	BuildSucceeded = "succeeded"
	BuildFailed    = "failed" // for good: the code, or what it needs to start, is at fault
)

// Build is the state of the build of a revision's code: State is one of the Build*
// constants, Message what the build said, Image what it made once it succeeded.
type Build struct {
	State, Message, Image string
}

// SettleRevision is a revision's status after its build: ready and failed are final; a
// revision that is not its function's latest and never got ready was superseded and never
// will; the latest one takes the state of the build and, built, is ready once missing (nil:
// nothing can be) says no secret it references is missing — a revision that could not
// start never takes traffic.
func SettleRevision(cur RevisionStatus, latest bool, b Build, missing func() string) RevisionStatus {
	if cur.Phase == RevisionReady || cur.Phase == RevisionFailed {
		return cur
	}
	switch {
	case !latest:
		cur.Phase, cur.Message = RevisionFailed, "superseded by a newer revision before its image was built"
	case b.State == BuildPending:
		cur.Phase, cur.Message = RevisionBuilding, "waiting for the build to start"
	case b.State == BuildSucceeded:
		if missing != nil {
			if m := missing(); m != "" {
				cur.Phase, cur.Message = RevisionBuilding, "built; waiting for a secret: "+m
				break
			}
		}
		cur.Phase, cur.Message, cur.Image = RevisionReady, "", b.Image
	case b.State == BuildFailed:
		cur.Phase, cur.Message = RevisionFailed, b.Message
	default:
		cur.Phase, cur.Message = RevisionBuilding, b.Message
	}
	return cur
}

// StatesOf is what the traffic rules read of a plane's revisions, in their order.
func StatesOf[R interface{ RevisionState() RevisionState }](revs []R) []RevisionState {
	out := make([]RevisionState, len(revs))
	for i, r := range revs {
		out[i] = r.RevisionState()
	}
	return out
}
