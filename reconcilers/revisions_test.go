package reconcilers_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	httpv1alpha1 "github.com/kedacore/http-add-on/operator/apis/http/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/history"
	"sless.dev/sless/scaling"
)

// functionWith waits until fn's status passes check.
func functionWith(t *testing.T, fn *v1.Function, what string, check func(*v1.Function) error) *v1.Function {
	t.Helper()
	got := &v1.Function{}
	eventually(t, what, func() error {
		if err := get(t, client.ObjectKeyFromObject(fn), got); err != nil {
			return err
		}
		return check(got)
	})
	return got
}

func trafficIs(want ...v1.ResolvedTrafficTarget) func(*v1.Function) error {
	return func(fn *v1.Function) error {
		if !slices.Equal(fn.Status.Traffic, want) {
			return fmt.Errorf("traffic %+v, want %+v", fn.Status.Traffic, want)
		}
		return nil
	}
}

// runsRevision checks that revision key has its Deployment, Service and HTTPScaledObject.
func runsRevision(t *testing.T, key client.ObjectKey) error {
	t.Helper()
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &httpv1alpha1.HTTPScaledObject{}} {
		if err := get(t, key, obj); err != nil {
			return fmt.Errorf("%T of %s: %w", obj, key.Name, err)
		}
	}
	return nil
}

// TestTrafficSplitTagsAndHistoryLimit: a split gives every revision with a share (or a tag)
// objects of its own, the resolved traffic names them; beyond revisionHistoryLimit the
// revisions without traffic are deleted, never one that serves.
func TestTrafficSplitTagsAndHistoryLimit(t *testing.T) {
	ns := newNamespace(t)
	fn := readyFunction(t, ns, "split", "a1")
	update(t, fn, func() { fn.Spec.Env = map[string]string{"V": "2"} })
	functionWith(t, fn, "revision 2 serving", trafficIs(v1.ResolvedTrafficTarget{Revision: "split-2", Latest: true, Percent: 100}))

	update(t, fn, func() {
		fn.Spec.Traffic = []v1.TrafficTarget{{Revision: "split-1", Percent: 50}, {Latest: true, Percent: 50, Tag: "canary"}}
	})
	functionWith(t, fn, "a 50/50 split with a tag", trafficIs(
		v1.ResolvedTrafficTarget{Revision: "split-1", Percent: 50},
		v1.ResolvedTrafficTarget{Revision: "split-2", Latest: true, Percent: 50, Tag: "canary"}))
	for _, n := range []int64{1, 2} {
		if err := runsRevision(t, revisionKey(fn, n)); err != nil {
			t.Error(err)
		}
	}

	// A tag without a share keeps its revision running; history beyond the limit goes.
	update(t, fn, func() {
		fn.Spec.RevisionHistoryLimit = 1
		fn.Spec.Traffic = []v1.TrafficTarget{{Revision: "split-1", Percent: 0, Tag: "old"}, {Latest: true, Percent: 100}}
		fn.Spec.Env = map[string]string{"V": "3"}
	})
	functionWith(t, fn, "revision 3 has latest's share", trafficIs(
		v1.ResolvedTrafficTarget{Revision: "split-1", Tag: "old"},
		v1.ResolvedTrafficTarget{Revision: "split-3", Latest: true, Percent: 100}))
	if err := runsRevision(t, revisionKey(fn, 1)); err != nil {
		t.Errorf("a tagged revision stopped: %v", err)
	}
	update(t, fn, func() { fn.Spec.Env = map[string]string{"V": "4"} })
	functionWith(t, fn, "revision 4 serving", func(got *v1.Function) error {
		if got.Status.LatestReadyRevision != "split-4" || got.Status.LastRevisionNumber != 4 {
			return fmt.Errorf("status %+v", got.Status)
		}
		return nil
	})
	eventually(t, "revision 2 (no traffic, beyond the one kept) deleted; 3 and the tagged 1 kept", func() error {
		if err := isNotFound(get(t, revisionKey(fn, 2), &v1.Revision{})); err != nil {
			return err
		}
		if err := get(t, revisionKey(fn, 3), &v1.Revision{}); err != nil {
			return err
		}
		return get(t, revisionKey(fn, 1), &v1.Revision{})
	})
}

// TestRolloutRollsBackOnErrors: a new ready revision takes the first step of the rollout;
// its failed calls in the invocation history above the limit send latest's share back to
// the previous revision, with the reason in status and a Warning Event. Calls that are not
// the function's own outcomes (callers that went away, bodies that did not arrive, 4xx)
// count for nothing (rules.RolloutOutcome, as in sless dev).
func TestRolloutRollsBackOnErrors(t *testing.T) {
	ns := newNamespace(t)
	fn := readyFunction(t, ns, "gated", "b1")
	update(t, fn, func() {
		fn.Spec.Rollout = &v1.RolloutSpec{Steps: []int32{50, 100}, IntervalSeconds: 3600, MaxErrorRate: "0.1", MinRequests: 4}
	})
	update(t, fn, func() { fn.Spec.Env = map[string]string{"V": "2"} })
	got := functionWith(t, fn, "the new revision at the first step", trafficIs(
		v1.ResolvedTrafficTarget{Revision: "gated-2", Latest: true, Percent: 50},
		v1.ResolvedTrafficTarget{Revision: "gated-1", Latest: true, Percent: 50}))
	if r := got.Status.Rollout; r == nil || r.Phase != "progressing" || r.Revision != "gated-2" || r.Previous != "gated-1" {
		t.Fatalf("rollout %+v", r)
	}
	start := got.Status.Rollout.StepStarted.Time
	for i, code := range []int{history.HTTPClientClosed, http.StatusRequestTimeout, http.StatusNotFound, http.StatusTooManyRequests} {
		for range 5 {
			rec := history.HTTPRecord(ns, "gated", start.Add(time.Duration(i)*time.Millisecond), time.Millisecond, code, "")
			rec.Revision = "gated-2"
			invocations.Record(rec)
		}
	}
	for i := range 10 {
		rec := history.Record{Namespace: ns, Function: "gated", Revision: "gated-2", Kind: history.KindHTTP,
			Start: start.Add(time.Duration(i) * time.Millisecond), Status: history.StatusSucceeded, HTTPStatus: 200}
		if i%2 == 0 {
			rec.Status, rec.HTTPStatus = history.StatusFailed, 500
		}
		invocations.Record(rec)
	}
	got = functionWith(t, fn, "rolled back", trafficIs(v1.ResolvedTrafficTarget{Revision: "gated-1", Latest: true, Percent: 100}))
	if r := got.Status.Rollout; r.Phase != "rolled_back" || !strings.Contains(r.Message, "error rate 0.50 (5 of 10 calls) above 0.10 at 50 %") {
		t.Errorf("rollout %+v", r)
	}
	eventually(t, "a Warning Event saying why", func() error {
		if events := functionEvents(t, fn); !slices.Contains(events, "Warning/RolloutRolledBack") {
			return fmt.Errorf("events %v", events)
		}
		return nil
	})
}

// TestUnversionedChildrenRemoved: the Deployment, Service and HTTPScaledObject named after a
// function, which ran it before revisions, go once its first revision serves.
func TestUnversionedChildrenRemoved(t *testing.T) {
	ns := newNamespace(t)
	fn := newFunction(ns, "legacy", "c1")
	create(t, fn)
	job := waitBuildJob(t, ns, "legacy", "c1")
	owner := []metav1.OwnerReference{*metav1.NewControllerRef(fn, v1.GroupVersion.WithKind("Function"))}
	labels := scaling.FunctionLabels(fn)
	old := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: ns, Labels: labels, OwnerReferences: owner},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 8080}}}}
	create(t, old)
	finishJob(t, job, true, "")
	waitFunction(t, fn, v1.FunctionReady)
	eventually(t, "the unversioned Service deleted", func() error {
		return isNotFound(get(t, client.ObjectKeyFromObject(old), &corev1.Service{}))
	})
	if err := runsRevision(t, revisionKey(fn, 1)); err != nil {
		t.Error(err)
	}
}
