package api

import (
	"cmp"

	"sless.dev/sless/rules"
)

// Default fills every field of s whose zero is no valid value with the function's default
// (the CRD's defaults, held equal to the rules constants by rules' limits test): a new
// function starts from the Default of nothing, and a function stored before a field
// existed reads as if it had the field's default. Both planes call it where a function is
// read or written: the gateway on the spec an update starts from, the cluster's API view
// of a Function, sless dev on every function it loads or writes. Protocol's zero is valid
// and is the default (rules.StoredProtocol stores the default as unset); empty traffic
// sends every call to latest.
func (s *FunctionSpec) Default() {
	s.MemoryMB = cmp.Or(s.MemoryMB, rules.DefaultMemoryMB)
	s.MaxReplicas = cmp.Or(s.MaxReplicas, rules.DefaultMaxReplicas)
	s.ScaleDownPeriodSec = cmp.Or(s.ScaleDownPeriodSec, rules.DefaultScaleDownSeconds)
	s.ScalingMetric = cmp.Or(s.ScalingMetric, rules.DefaultScalingMetric)
	s.ScalingTarget = cmp.Or(s.ScalingTarget, rules.DefaultScalingTarget)
	s.StreamIdleTimeoutSec = cmp.Or(s.StreamIdleTimeoutSec, rules.DefaultStreamIdleSeconds)
	s.Protocol = cmp.Or(s.Protocol, rules.DefaultProtocol)
	if len(s.Traffic) == 0 {
		s.Traffic = rules.DefaultTraffic()
	}
	s.RevisionHistoryLimit = cmp.Or(s.RevisionHistoryLimit, rules.DefaultRevisionHistoryLimit)
	s.Async.MaxJobs = cmp.Or(s.Async.MaxJobs, rules.DefaultAsyncJobs)
	if s.Async.MaxAttempts == 0 { // no retry settings at all: a backoff of 0 is valid only beside them
		s.Async.MaxAttempts = rules.DefaultMaxAttempts
		s.Async.BackoffMs = cmp.Or(s.Async.BackoffMs, rules.DefaultBackoffMillis)
	}
}
