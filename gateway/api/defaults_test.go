package api

import (
	"reflect"
	"testing"

	"sless.dev/sless/rules"
)

func TestFunctionSpecDefault(t *testing.T) {
	all := FunctionSpec{MemoryMB: rules.DefaultMemoryMB, MaxReplicas: rules.DefaultMaxReplicas,
		ScaleDownPeriodSec: rules.DefaultScaleDownSeconds, ScalingMetric: rules.DefaultScalingMetric, ScalingTarget: rules.DefaultScalingTarget,
		StreamIdleTimeoutSec: rules.DefaultStreamIdleSeconds, Protocol: rules.DefaultProtocol,
		Async:   AsyncPolicy{MaxAttempts: rules.DefaultMaxAttempts, BackoffMs: rules.DefaultBackoffMillis, MaxJobs: rules.DefaultAsyncJobs},
		Traffic: rules.DefaultTraffic(), RevisionHistoryLimit: rules.DefaultRevisionHistoryLimit}
	with := func(edit func(*FunctionSpec)) FunctionSpec {
		s := all
		s.Traffic = rules.DefaultTraffic()
		edit(&s)
		return s
	}
	pinned := []TrafficTarget{{Revision: "f-1", Percent: 100}}
	for _, tc := range []struct {
		name     string
		in, want FunctionSpec
	}{
		{"a new function takes every default", FunctionSpec{}, all},
		{"set fields stay", with(func(s *FunctionSpec) {
			s.MemoryMB, s.MinReplicas, s.StreamIdleTimeoutSec, s.Protocol, s.Traffic, s.RevisionHistoryLimit = 512, 2, 5, rules.ProtocolH2C, pinned, 3
			s.Async = AsyncPolicy{Enabled: true, MaxAttempts: 1, BackoffMs: 0, MaxJobs: 4}
		}), with(func(s *FunctionSpec) {
			s.MemoryMB, s.MinReplicas, s.StreamIdleTimeoutSec, s.Protocol, s.Traffic, s.RevisionHistoryLimit = 512, 2, 5, rules.ProtocolH2C, pinned, 3
			s.Async = AsyncPolicy{Enabled: true, MaxAttempts: 1, BackoffMs: 0, MaxJobs: 4}
		})},
		{"zero is valid where it means something", with(func(s *FunctionSpec) { s.MinReplicas, s.TimeoutSec = 0, 0 }), all},
		{"stored before the stream idle bound", with(func(s *FunctionSpec) { s.StreamIdleTimeoutSec = 0 }), all},
		{"stored before protocols", with(func(s *FunctionSpec) { s.Protocol = "" }), all},
		{"stored before revisions", with(func(s *FunctionSpec) { s.Traffic, s.RevisionHistoryLimit = nil, 0 }), all},
		{"empty traffic", with(func(s *FunctionSpec) { s.Traffic = []TrafficTarget{} }), all},
		{"stored before max_jobs", with(func(s *FunctionSpec) { s.Async.MaxJobs = 0 }), all},
		{"stored before async settings", with(func(s *FunctionSpec) { s.Async = AsyncPolicy{Enabled: true} }),
			with(func(s *FunctionSpec) { s.Async.Enabled = true })},
		{"a backoff of its own without attempts", with(func(s *FunctionSpec) { s.Async.MaxAttempts, s.Async.BackoffMs = 0, 250 }),
			with(func(s *FunctionSpec) { s.Async.BackoffMs = 250 })},
	} {
		got := tc.in
		got.Default()
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
		again := got
		again.Default()
		if !reflect.DeepEqual(again, got) {
			t.Errorf("%s: a second Default changed %+v to %+v", tc.name, got, again)
		}
	}
}
