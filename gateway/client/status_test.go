package client

import (
	"testing"
	"time"

	"sless.dev/sless/gateway/api"
)

func TestWaitRules(t *testing.T) {
	t1, t2 := time.Unix(1, 0), time.Unix(2, 0)
	failed := api.FunctionStatus{Phase: api.PhaseFailed, Message: "build failed", LastBuildError: "x", LastBuildTime: &t1}
	for _, tc := range []struct {
		prev, cur api.FunctionStatus
		want      bool
	}{
		{api.FunctionStatus{Phase: api.PhaseBuilding}, failed, true},
		{failed, failed, false}, // the older build's failure
		{failed, api.FunctionStatus{Phase: api.PhaseFailed, Message: "build failed", LastBuildError: "x", LastBuildTime: &t2}, true},
		{failed, api.FunctionStatus{Phase: api.PhaseReady}, false},
	} {
		if got := NewFailure(tc.prev, tc.cur); got != tc.want {
			t.Errorf("NewFailure(%+v, %+v) = %v", tc.prev, tc.cur, got)
		}
	}
	job := func(observed int64, phase string) api.Job {
		return api.Job{Status: api.JobStatus{ObservedRunID: observed, Phase: phase}}
	}
	for _, tc := range []struct {
		j    api.Job
		run  int64
		want bool
	}{
		{job(2, api.JobSucceeded), 2, true}, {job(2, api.JobFailed), 2, true}, {job(1, api.JobSucceeded), 2, false},
		{job(2, api.JobRunning), 2, false}, {job(0, api.JobSkipped), 0, true}, {job(2, api.JobSkipped), 2, false},
	} {
		if got := RunDone(tc.j, tc.run); got != tc.want {
			t.Errorf("RunDone(%+v, %d) = %v", tc.j.Status, tc.run, got)
		}
	}
}
