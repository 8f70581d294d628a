package reconcilers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	httpv1alpha1 "github.com/kedacore/http-add-on/operator/apis/http/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/history"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
)

// A Function's revisions (Knative's Configuration and Route in one reconciler): every
// change to what the spec runs makes a Revision, an immutable snapshot owned by the
// Function; every revision the traffic needs owns its Deployment, Service and
// HTTPScaledObject under its own host (rules.RevisionHost), scaling on its own; the
// gateway splits calls by status.traffic. Deleting a revision deletes what runs it (owner
// references).
//
// Traffic moves without a failed call: a revision that starts serving gets its objects
// first and enters status.traffic only once the interceptor has had routeSettle to learn
// its host; one that stops serving keeps its objects for retireGrace, while gateways that
// routed by the older status finish.
var (
	routeSettle = 2 * time.Second
	retireGrace = 15 * time.Second
)

// reasonRolledBack is the Event reason of a rollout that returned traffic to the previous
// revision.
const reasonRolledBack = "RolloutRolledBack"

// revisionsOf lists fn's revisions, oldest first.
func (r *FunctionReconciler) revisionsOf(ctx context.Context, fn *v1.Function) ([]*v1.Revision, error) {
	var list v1.RevisionList
	if err := r.List(ctx, &list, client.InNamespace(fn.Namespace), client.MatchingLabels{scaling.LabelFunction: fn.Name}); err != nil {
		return nil, fmt.Errorf("listing revisions of function %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	var revs []*v1.Revision
	for i := range list.Items {
		if rev := &list.Items[i]; metav1.IsControlledBy(rev, fn) && rev.DeletionTimestamp.IsZero() {
			revs = append(revs, rev)
		}
	}
	slices.SortFunc(revs, func(a, b *v1.Revision) int { return int(a.Spec.Number - b.Spec.Number) })
	return revs, nil
}

// newRevision makes the revision of what fn's spec runs now unless the latest one runs it;
// a function with neither source nor image has nothing to run yet. Numbers count up from
// the highest ever made (status) or found, so one is never reused.
func (r *FunctionReconciler) newRevision(ctx context.Context, fn *v1.Function, revs []*v1.Revision) ([]*v1.Revision, error) {
	if fn.Spec.Source == nil && fn.Spec.Image == "" {
		return revs, nil
	}
	n := fn.Status.LastRevisionNumber
	if len(revs) > 0 {
		latest := revs[len(revs)-1]
		if scaling.SameRun(latest, fn) {
			return revs, nil
		}
		n = max(n, latest.Spec.Number)
	}
	rev := scaling.MakeRevision(fn, n+1)
	if err := r.Create(ctx, rev); err != nil {
		// AlreadyExists: the cache has not seen a revision made a moment ago; the retry has.
		return revs, fmt.Errorf("creating revision %s: %w", rev.Name, err)
	}
	fn.Status.LastRevisionNumber = n + 1
	log.FromContext(ctx).Info("created revision", "revision", rev.Name)
	return append(revs, rev), nil
}

// buildOf is the state of the build of fn's current code (rules.Build): its Built condition
// and, once built, its image.
func buildOf(fn *v1.Function) rules.Build {
	built := meta.FindStatusCondition(fn.Status.Conditions, v1.ConditionBuilt)
	switch {
	case built == nil:
		return rules.Build{State: rules.BuildPending}
	case built.Status == metav1.ConditionTrue && fn.Status.Image != "":
		return rules.Build{State: rules.BuildSucceeded, Image: fn.Status.Image}
	case built.Reason == v1.ReasonBuildFailed || built.Reason == v1.ReasonImageNotAllowed:
		return rules.Build{State: rules.BuildFailed, Message: built.Message}
	}
	return rules.Build{State: rules.BuildRunning, Message: built.Message}
}

// revisionPhase settles a revision's phase (rules.SettleRevision) from the function's
// current build; missing says which secret the revision references does not exist.
func revisionPhase(fn *v1.Function, rev *v1.Revision, latest bool, missing func() string) v1.RevisionStatus {
	st := rev.Status
	s := rules.SettleRevision(rules.RevisionStatus{Phase: string(st.Phase), Message: st.Message, Image: st.Image}, latest, buildOf(fn), missing)
	st.Phase, st.Message, st.Image = v1.RevisionPhase(s.Phase), s.Message, s.Image
	return st
}

// reconcileRevisions makes the revision of the current spec, settles the revisions'
// phases, resolves the traffic (and the rollout), runs every revision the traffic needs,
// retires the others and deletes the revisions beyond the history limit. It returns what
// kept a revision from running, for the Deployed condition.
func (r *FunctionReconciler) reconcileRevisions(ctx context.Context, fn *v1.Function) (string, error) {
	st := &fn.Status
	revs, err := r.revisionsOf(ctx, fn)
	if err != nil {
		return "", err
	}
	if revs, err = r.newRevision(ctx, fn, revs); err != nil {
		return "", err
	}
	want := make(map[string]v1.RevisionStatus, len(revs))
	stored := make(map[string]v1.RevisionStatus, len(revs))
	var missing string
	for i, rev := range revs {
		stored[rev.Name] = *rev.Status.DeepCopy()
		want[rev.Name] = revisionPhase(fn, rev, i == len(revs)-1, func() string {
			_, m := secretVersions(ctx, r.Client, fn.Namespace, &rev.Spec.CodeSpec)
			if m != "" {
				missing = "revision " + rev.Name + ": " + m
			}
			return m
		})
		rev.Status.Phase = want[rev.Name].Phase // the rules below read the settled phase
	}
	states := rules.StatesOf(revs)
	latestReady := rules.LatestReady(states)
	rollout := r.rolloutOf(ctx, fn, latestReady)
	desired := rules.DesiredTraffic(fn.Spec.TrafficRules(), latestReady, rollout)
	if n := len(revs); n > 0 {
		st.LatestCreatedRevision = revs[n-1].Name
	}
	st.LatestReadyRevision, st.Rollout = latestReady, v1.RolloutStatusOf(rollout)

	now := time.Now()
	routed := v1.ResolvedRules(st.Traffic)
	var wait time.Duration
	settled := func(name string) bool {
		s := want[name]
		if name == "" || !s.Serving || s.ServingChanged == nil {
			return name == ""
		}
		left := routeSettle - now.Sub(s.ServingChanged.Time)
		if left > 0 {
			wait = minWait(wait, left)
		}
		return left <= 0
	}
	// Start what the desired traffic needs; keep what the routed traffic still uses.
	for _, rev := range revs {
		s := want[rev.Name]
		need := rev.Status.Phase == rules.RevisionReady && (rules.Serving(desired, rev.Name) || rules.Serving(routed, rev.Name))
		if need != s.Serving {
			s.Serving, s.ServingChanged = need, &metav1.Time{Time: now}
		}
		want[rev.Name] = s
	}
	serving := slices.ContainsFunc(routed, func(t rules.ResolvedTarget) bool { return t.Revision != "" })
	if serving && slices.ContainsFunc(desired, func(t rules.ResolvedTarget) bool { return !settled(t.Revision) }) {
		log.FromContext(ctx).V(1).Info("waiting for new revisions' routes before moving traffic", "after", wait)
	} else {
		routed = desired
	}
	st.Traffic = v1.ResolvedStatus(routed)

	var errs []error
	paused, err := r.httpPaused(ctx, fn)
	if err != nil {
		return "", err
	}
	for _, rev := range revs {
		s := want[rev.Name]
		if s.Serving && !rules.Serving(desired, rev.Name) && !rules.Serving(routed, rev.Name) {
			s.Serving, s.ServingChanged = false, &metav1.Time{Time: now}
			want[rev.Name] = s
		}
		switch {
		case s.Serving:
			rev.Status.Image = s.Image
			if m, err := r.runRevision(ctx, fn, rev, paused); err != nil {
				errs = append(errs, fmt.Errorf("revision %s: %w", rev.Name, err))
			} else if m != "" && missing == "" {
				missing = "revision " + rev.Name + ": " + m
			}
		case s.ServingChanged != nil && now.Sub(s.ServingChanged.Time) < retireGrace:
			wait = minWait(wait, retireGrace-now.Sub(s.ServingChanged.Time))
		default:
			if err := r.retireRevision(ctx, rev); err != nil {
				errs = append(errs, err)
			}
		}
		if err := r.patchRevisionStatus(ctx, rev, stored[rev.Name], s); err != nil {
			errs = append(errs, err)
		}
	}
	if err := r.collectRevisions(ctx, fn, states, append(slices.Clone(desired), routed...)); err != nil {
		errs = append(errs, err)
	}
	if len(routed) > 0 && equality.Semantic.DeepEqual(routed, desired) {
		if err := r.deleteUnversionedChildren(ctx, fn); err != nil {
			errs = append(errs, err)
		}
	}
	if rollout != nil && rollout.Phase == rules.RolloutProgressing {
		wait = minWait(wait, rolloutCheck)
	}
	if err := errors.Join(errs...); err != nil {
		return missing, err
	}
	if wait > 0 {
		return missing, retryAfter(wait)
	}
	return missing, nil
}

func minWait(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}

// runRevision applies the Deployment, Service and HTTPScaledObject of a serving revision,
// or says which secret it references is missing (its pods could not start; the objects stay
// as they are).
func (r *FunctionReconciler) runRevision(ctx context.Context, fn *v1.Function, rev *v1.Revision, paused bool) (string, error) {
	versions, missing := secretVersions(ctx, r.Client, fn.Namespace, &rev.Spec.CodeSpec)
	if missing != "" {
		return missing, nil
	}
	// KEDA and the HPA own replicas once they first scale; until then (a revision at zero
	// that never had a request) sless keeps the value it created the Deployment with.
	if err := ensure(ctx, r.children, rev, scaling.MakeDeployment(fn, rev, versions, r.Options), &appsv1.Deployment{},
		func(desired *appsv1.Deployment, owns func(...string) bool) {
			if !owns("spec", "replicas") {
				desired.Spec.Replicas = nil
			}
		}); err != nil {
		return "", err
	}
	if err := ensure(ctx, r.children, rev, scaling.MakeService(rev), &corev1.Service{}, nil); err != nil {
		return "", err
	}
	if err := ensure(ctx, r.children, rev, scaling.MakeHTTPScaledObject(fn, rev, paused, r.Options), &httpv1alpha1.HTTPScaledObject{}, nil); err != nil {
		return "", err
	}
	return "", r.syncScaledObjectPause(ctx, types.NamespacedName{Namespace: rev.Namespace, Name: rev.Name}, paused)
}

// retireRevision deletes what ran a revision that no longer serves (none is fine).
func (r *FunctionReconciler) retireRevision(ctx context.Context, rev *v1.Revision) error {
	return r.deleteChildren(ctx, rev, types.NamespacedName{Namespace: rev.Namespace, Name: rev.Name})
}

// deleteUnversionedChildren removes the Deployment, Service and HTTPScaledObject named after
// the function itself, which ran it before functions had revisions, once its revisions
// serve all of its traffic.
func (r *FunctionReconciler) deleteUnversionedChildren(ctx context.Context, fn *v1.Function) error {
	return r.deleteChildren(ctx, fn, client.ObjectKeyFromObject(fn))
}

// deleteChildren deletes the Deployment, Service and HTTPScaledObject key that owner
// controls; a lookup in the cache makes nothing to delete cost no request.
func (r *FunctionReconciler) deleteChildren(ctx context.Context, owner metav1.Object, key types.NamespacedName) error {
	for _, obj := range []client.Object{&httpv1alpha1.HTTPScaledObject{}, &corev1.Service{}, &appsv1.Deployment{}} {
		err := r.Get(ctx, key, obj)
		if err == nil && metav1.IsControlledBy(obj, owner) {
			err = r.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if err == nil {
				log.FromContext(ctx).Info("deleted the objects of a revision without traffic", "kind", fmt.Sprintf("%T", obj), "name", key.Name)
			}
		}
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %T %s: %w", obj, key, err)
		}
	}
	return nil
}

// patchRevisionStatus writes a revision's status (stored before this reconcile) once, when
// it changed.
func (r *FunctionReconciler) patchRevisionStatus(ctx context.Context, rev *v1.Revision, stored, want v1.RevisionStatus) error {
	if equality.Semantic.DeepEqual(stored, want) {
		return nil
	}
	before := rev.DeepCopy()
	before.Status = stored
	patched := before.DeepCopy()
	patched.Status = want
	if err := r.Status().Patch(ctx, patched, client.MergeFrom(before)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("patching status of revision %s: %w", rev.Name, err)
	}
	return nil
}

// collectRevisions deletes the revisions beyond fn's history limit (rules.RevisionsToDelete);
// the garbage collector deletes their objects.
func (r *FunctionReconciler) collectRevisions(ctx context.Context, fn *v1.Function, states []rules.RevisionState, traffic []rules.ResolvedTarget) error {
	for _, name := range rules.RevisionsToDelete(states, traffic, int(fn.Spec.RevisionHistoryLimit)) {
		rev := &v1.Revision{}
		rev.Namespace, rev.Name = fn.Namespace, name
		if err := r.Delete(ctx, rev, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting revision %s beyond the history limit: %w", name, err)
		}
		log.FromContext(ctx).Info("deleted revision beyond the history limit", "revision", name, "limit", fn.Spec.RevisionHistoryLimit)
	}
	return nil
}

// rolloutCheck is how often a rollout in progress is judged.
const rolloutCheck = 2 * time.Second

// rolloutOf is where fn's rollout stands now (rules.NextRollout), judged by its calls in
// the invocation history. A rollback is an Event.
func (r *FunctionReconciler) rolloutOf(ctx context.Context, fn *v1.Function, latestReady string) *rules.RolloutState {
	next, rolledBack := rules.NextRollout(fn.Spec.Rollout.Policy(), fn.Status.Rollout.State(), latestReady, fn.Status.LatestReadyRevision, time.Now(),
		history.RolloutJudge(ctx, r.History, fn.Namespace, fn.Name, "the operator runs without an invocation history to judge the rollout by (--database-url)"))
	if rolledBack && r.Recorder != nil {
		r.Recorder.Eventf(fn, nil, corev1.EventTypeWarning, reasonRolledBack, "Rollout", "%s", next.Message)
	}
	return next
}
