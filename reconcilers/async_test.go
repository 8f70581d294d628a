package reconcilers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/scaling"
)

// TestAsyncDispatcherFollowsTheSetting: enabling async renders the dispatcher ScaledJob in the
// platform namespace (credentials from the platform's Secret, never the tenant's), disabling
// and deleting remove it, and the Async condition tells the gateway which holds.
func TestAsyncDispatcherFollowsTheSetting(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	fn := readyFunction(t, ns, "worker", "a")
	key := client.ObjectKey{Namespace: opts.Build.Namespace, Name: scaling.AsyncName(ns, "worker")}
	asyncCondition := func(want metav1.ConditionStatus, reason string) {
		t.Helper()
		eventually(t, "the Async condition "+string(want), func() error {
			got := &v1.Function{}
			if err := get(t, client.ObjectKeyFromObject(fn), got); err != nil {
				return err
			}
			c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionAsync)
			switch {
			case want == "" && c != nil:
				return fmt.Errorf("condition still there: %+v", c)
			case want != "" && (c == nil || c.Status != want || c.Reason != reason || c.ObservedGeneration != got.Generation):
				return fmt.Errorf("condition %+v", c)
			}
			return nil
		})
	}
	gone := func() error {
		for _, obj := range []client.Object{&kedav1alpha1.ScaledJob{}, &kedav1alpha1.TriggerAuthentication{}} {
			if err := isNotFound(get(t, key, obj)); err != nil {
				return fmt.Errorf("%T: %w", obj, err)
			}
		}
		return nil
	}
	if err := gone(); err != nil {
		t.Fatalf("async off, yet: %v", err)
	}

	update(t, fn, func() {
		fn.Spec.Async = v1.AsyncSpec{Enabled: true, Retry: v1.RetryPolicy{MaxAttempts: 5, BackoffMillis: 200}, MaxJobs: 3}
	})
	sj := &kedav1alpha1.ScaledJob{}
	eventually(t, "the asynchronous dispatcher", func() error { return get(t, key, sj) })
	c := sj.Spec.JobTargetRef.Template.Spec.Containers[0]
	for _, want := range []string{"--async", "--queue=" + ns + ".async.worker", "--dead-letter-queue=" + ns + ".async.worker.dlq", "--max-attempts=5", "--backoff=200ms", "--exit-when-empty"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("dispatcher args %v lack %s", c.Args, want)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || !slices.Contains([]string{opts.AsyncSecret, opts.IdentitySecret}, e.ValueFrom.SecretKeyRef.Name) {
			t.Errorf("env %s does not come from the platform's secrets: %+v", e.Name, e.ValueFrom)
		}
	}
	if *sj.Spec.MaxReplicaCount != 3 || sj.Spec.Triggers[0].Metadata["queueName"] != ns+".async.worker" {
		t.Errorf("scaled job %+v", sj.Spec)
	}
	if err := get(t, key, &kedav1alpha1.TriggerAuthentication{}); err != nil {
		t.Fatal(err)
	}
	asyncCondition(metav1.ConditionTrue, v1.ReasonAsyncDraining)

	update(t, fn, func() { fn.Spec.Async.Enabled = false })
	eventually(t, "the dispatcher removed", gone)
	asyncCondition("", "")

	update(t, fn, func() { fn.Spec.Async.Enabled = true })
	eventually(t, "the dispatcher back", func() error { return get(t, key, &kedav1alpha1.ScaledJob{}) })
	if err := env.Client.Delete(ctx, fn); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the dispatcher removed with the function", gone)
}
