package reconcilers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"sless.dev/sless/scaling"
)

// annotationSpecHash records the hash of what sless last rendered for a child. Comparing it
// catches removals (an env var, a paused annotation) that a derivative comparison cannot,
// while the derivative comparison catches edits made by others; neither is fooled by the
// fields the API server defaults.
const annotationSpecHash = "sless.dev/spec-hash"

// managedAnnotations are removed from a child when the desired object no longer has them.
var managedAnnotations = []string{scaling.AnnotationPaused, scaling.AnnotationPausedReplicas}

// NotOwnedError is returned when a child's name is taken by an object sless does not control;
// sless never overwrites such an object.
type NotOwnedError struct{ Kind, Namespace, Name string }

func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("%s %s/%s exists and is not managed by sless: delete or rename it", e.Kind, e.Namespace, e.Name)
}

// ensure makes the live object named like desired match desired for the fields sless owns:
// create when missing, update only on difference, never touch an object owned by another
// controller. prepare (optional) copies fields others own (e.g. KEDA's replicas) from live
// into desired; merge copies desired's owned fields into live. It reports whether it wrote.
func ensure[T client.Object](ctx context.Context, c client.Client, owner metav1.Object, desired, live T,
	prepare func(desired, live T), merge func(live, desired T)) (bool, error) {
	kind := fmt.Sprintf("%T", desired)
	hash, err := specHash(desired)
	if err != nil {
		return false, fmt.Errorf("hashing %s %s: %w", kind, desired.GetName(), err)
	}
	setAnnotation(desired, annotationSpecHash, hash)

	err = c.Get(ctx, client.ObjectKeyFromObject(desired), live)
	if apierrors.IsNotFound(err) {
		if err := c.Create(ctx, desired); err != nil {
			return false, fmt.Errorf("creating %s %s: %w", kind, desired.GetName(), err)
		}
		log.FromContext(ctx).V(1).Info("created child", "kind", kind, "name", desired.GetName())
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("getting %s %s: %w", kind, desired.GetName(), err)
	}
	if owner != nil && !metav1.IsControlledBy(live, owner) {
		return false, &NotOwnedError{Kind: kind, Namespace: live.GetNamespace(), Name: live.GetName()}
	}
	if prepare != nil {
		prepare(desired, live)
	}
	if live.GetAnnotations()[annotationSpecHash] == hash && equality.Semantic.DeepDerivative(desired, live) {
		return false, nil
	}
	merge(live, desired)
	labels := live.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	for k, v := range desired.GetLabels() {
		labels[k] = v
	}
	live.SetLabels(labels)
	annotations := live.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	for _, k := range managedAnnotations {
		delete(annotations, k)
	}
	for k, v := range desired.GetAnnotations() {
		annotations[k] = v
	}
	live.SetAnnotations(annotations)
	live.SetOwnerReferences(desired.GetOwnerReferences())
	if err := c.Update(ctx, live); err != nil {
		return false, fmt.Errorf("updating %s %s: %w", kind, desired.GetName(), err)
	}
	log.FromContext(ctx).V(1).Info("updated child", "kind", kind, "name", desired.GetName())
	return true, nil
}

func specHash(obj client.Object) (string, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

func setAnnotation(obj client.Object, k, v string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	obj.SetAnnotations(a)
}

// reconcileStatus runs reconcile on obj, sets observedGeneration and patches the status once
// at the end, only when it changed (Cluster API's patch helper, reduced to what sless
// needs). status returns a pointer to obj's status and to its observedGeneration. The
// reconcile error is returned after the patch, so a failure is recorded in the status too.
func reconcileStatus[T client.Object](ctx context.Context, c client.Client, kind string, obj T,
	reconcile func(context.Context, T) error, status func(T) (any, *int64)) error {
	before := obj.DeepCopyObject().(T)
	err := reconcile(ctx, obj)
	st, observed := status(obj)
	*observed = obj.GetGeneration()
	if old, _ := status(before); !equality.Semantic.DeepEqual(old, st) {
		if perr := c.Status().Patch(ctx, obj, client.MergeFrom(before)); perr != nil {
			return fmt.Errorf("patching status of %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), perr)
		}
	}
	return err
}
