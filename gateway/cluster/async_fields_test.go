package cluster_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
)

// TestFunctionAsyncFieldsOnTheCRD: the API's async fields are the Function's spec.async —
// max_jobs included (the cap on the dispatcher Jobs the operator's ScaledJob runs), its
// default the CRD's — both ways, and out-of-range values are 400s naming the API field.
func TestFunctionAsyncFieldsOnTheCRD(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	tn := h.tenant()
	ctx := context.Background()
	crd := func() v1alpha1.AsyncSpec {
		t.Helper()
		var fn v1alpha1.Function
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: "w"}, &fn); err != nil {
			t.Fatal(err)
		}
		return fn.Spec.Async
	}

	fn, err := tn.c.CreateFunction(ctx, tn.ns, api.CreateFunction{Name: "w", FunctionFields: api.FunctionFields{Runtime: ptr.To("go1.23"),
		Async: &api.AsyncFields{Enabled: ptr.To(true)}}})
	if err != nil {
		t.Fatal(err)
	}
	if a := fn.Async; a.MaxJobs != 10 || a.MaxAttempts != 3 || a.BackoffMs != 1000 {
		t.Fatalf("created with defaults: %+v, want max_jobs 10, max_attempts 3, backoff_ms 1000", a)
	}
	if a := crd(); a.MaxJobs != 10 || !a.Enabled {
		t.Fatalf("CRD after create: %+v", a)
	}

	fn, err = tn.c.UpdateFunction(ctx, tn.ns, "w", api.FunctionFields{Async: &api.AsyncFields{MaxJobs: ptr.To(int32(4)), MaxAttempts: ptr.To(int32(5)),
		BackoffMs: ptr.To(int32(250)), DeadLetterQueue: ptr.To(tn.ns + ".failed")}})
	if err != nil {
		t.Fatal(err)
	}
	want := v1alpha1.AsyncSpec{Enabled: true, Retry: v1alpha1.RetryPolicy{MaxAttempts: 5, BackoffMillis: 250}, DeadLetterQueue: tn.ns + ".failed", MaxJobs: 4}
	if a := crd(); a != want {
		t.Fatalf("CRD after the update: %+v, want %+v", a, want)
	}
	if fn.Async.MaxJobs != 4 || !fn.Async.Enabled {
		t.Fatalf("update answer: %+v", fn.Async)
	}
	// An update of another field keeps it.
	if fn, err = tn.c.UpdateFunction(ctx, tn.ns, "w", api.FunctionFields{MemoryMB: ptr.To(int32(256))}); err != nil || fn.Async.MaxJobs != 4 || crd().MaxJobs != 4 {
		t.Fatalf("after a memory-only update: %+v, %v; CRD %+v", fn.Async, err, crd())
	}

	// Set on the object (kubectl), read through the API.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var obj v1alpha1.Function
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: "w"}, &obj); err != nil {
			return err
		}
		obj.Spec.Async.MaxJobs = 7
		return env.Client.Update(ctx, &obj)
	}); err != nil {
		t.Fatal(err)
	}
	if got, err := tn.c.GetFunction(ctx, tn.ns, "w"); err != nil || got.Async.MaxJobs != 7 {
		t.Fatalf("API after kubectl set maxJobs 7: %+v, %v", got.Async, err)
	}

	base := h.URL + "/v1/namespaces/" + tn.ns
	for _, body := range []string{`{"async":{"max_jobs":0}}`, `{"async":{"max_jobs":101}}`, `{"async":{"max_jobs":-1}}`} {
		code, e, _ := do(t, http.MethodPut, base+"/functions/w", tn.token, "application/json", strings.NewReader(body))
		if code != http.StatusBadRequest || e.Field != "async.max_jobs" {
			t.Errorf("%s: %d %+v, want 400 naming async.max_jobs", body, code, e)
		}
	}
	if a := crd(); a.MaxJobs != 7 {
		t.Fatalf("a refused update changed the CRD: %+v", a)
	}
}
