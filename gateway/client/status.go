package client

import (
	"strings"
	"time"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
)

// The rules a client waits by: the API's statuses say what was observed, and these read
// them for "is the change I just sent done?".

// NewFailure reports whether cur is a Failed status that was not already there in prev, the
// status seen right after the change was sent: the API does not say which generation a
// Failed phase belongs to, so an older build's failure must not end a wait for a new one.
func NewFailure(prev, cur api.FunctionStatus) bool {
	if cur.Phase != api.PhaseFailed {
		return false
	}
	if prev.Phase != api.PhaseFailed {
		return true
	}
	return cur.LastBuildError != prev.LastBuildError || cur.Message != prev.Message ||
		!sameTime(cur.LastBuildTime, prev.LastBuildTime)
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// RunDone reports whether the job's status describes its run runID and that run ended
// (Succeeded or Failed; Skipped only for run 0, which creates the job without running it).
func RunDone(j api.Job, runID int64) bool {
	if j.Status.ObservedRunID != runID {
		return false
	}
	switch j.Status.Phase {
	case api.JobSucceeded, api.JobFailed:
		return true
	case api.JobSkipped:
		return runID == 0
	}
	return false
}

// HeldForBuildSlot reports a function whose build the operator holds back for a slot
// (--max-concurrent-builds): a wait for its build does not count that time, which is the
// cluster's queue, not the build's.
func HeldForBuildSlot(st api.FunctionStatus) bool {
	return strings.HasPrefix(st.Message, rules.BuildSlotWait)
}
