package gateway

import (
	"errors"
	"testing"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
)

// TestAsyncMaxJobsField: max_jobs defaults to the CRD's 10, is kept when not sent, is filled
// in for a function stored before the API had it, and must be 1-100 when sent.
func TestAsyncMaxJobsField(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	spec := defaultFunctionSpec()
	spec.Runtime = "go1.23"
	applyFunctionFields(&spec, api.FunctionFields{Async: &api.AsyncFields{Enabled: new(bool)}})
	if spec.Async.MaxJobs != 10 || validateFunctionSpec(spec) != nil {
		t.Fatalf("new function: max_jobs %d, %v; want the default 10", spec.Async.MaxJobs, validateFunctionSpec(spec))
	}
	applyFunctionFields(&spec, api.FunctionFields{Async: &api.AsyncFields{MaxJobs: i32(4)}})
	applyFunctionFields(&spec, api.FunctionFields{MemoryMB: i32(256)})
	if spec.Async.MaxJobs != 4 {
		t.Fatalf("max_jobs %d after an update that did not send it, want 4", spec.Async.MaxJobs)
	}
	stored := spec
	stored.Async.MaxJobs = 0 // written before max_jobs existed
	applyFunctionFields(&stored, api.FunctionFields{MemoryMB: i32(64)})
	if stored.Async.MaxJobs != 10 || validateFunctionSpec(stored) != nil {
		t.Fatalf("an old function updated: max_jobs %d, want the default 10", stored.Async.MaxJobs)
	}
	for _, v := range []int32{0, -1, 101} {
		s := spec
		applyFunctionFields(&s, api.FunctionFields{Async: &api.AsyncFields{MaxJobs: i32(v)}})
		var ie *backend.InvalidError
		if err := validateFunctionSpec(s); !errors.As(err, &ie) || ie.Field != "async.max_jobs" {
			t.Errorf("max_jobs %d: %v, want an error naming async.max_jobs", v, err)
		}
	}
	for _, v := range []int32{1, 100} {
		s := spec
		applyFunctionFields(&s, api.FunctionFields{Async: &api.AsyncFields{MaxJobs: i32(v)}})
		if err := validateFunctionSpec(s); err != nil || s.Async.MaxJobs != v {
			t.Errorf("max_jobs %d: %v", v, err)
		}
	}
}
