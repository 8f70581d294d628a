package reconcilers

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// fieldOwner is the field manager the operator applies every child as.
const fieldOwner = client.FieldOwner("sless-operator")

// appliedCacheSize bounds what children remembers; a child it forgot costs one apply that
// changes nothing.
const appliedCacheSize = 1 << 14

// NotOwnedError is returned when a child's name is taken by an object sless does not control;
// sless never overwrites such an object.
type NotOwnedError struct{ Kind, Namespace, Name string }

func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("%s %s/%s exists and is not managed by sless: delete or rename it", e.Kind, e.Namespace, e.Name)
}

// children writes the objects the reconcilers render (Deployments, Services,
// HTTPScaledObjects, CronJobs, ScaledJobs, TriggerAuthentications) by server-side apply:
// the API server merges sless's fields with the ones KEDA, the HPA and the add-on own
// (replicas, finalizers, status), so no read-modify-write can conflict, and a field sless
// stops rendering (a removed variable, the paused annotation) is removed.
//
// An apply that changes nothing is still a request. children remembers, per child, the
// object it last applied and the fields the API server then recorded as sless's, and sends
// nothing while both are the same: others' writes to their own fields leave sless's set
// alone, while a write that takes one of sless's fields (kubectl edit) shrinks it, so the
// next reconcile applies again and takes the field back.
type children struct {
	client.Client
	applied *lru.Cache // childKey → appliedState
}

func newChildren(c client.Client) *children {
	return &children{Client: c, applied: lru.New(appliedCacheSize)}
}

type childKey struct {
	gvk schema.GroupVersionKind
	types.NamespacedName
}

// appliedState is what an apply left: the object's UID (a recreated child is applied
// anew), the hash of the applied object and of sless's managed fields after it.
type appliedState struct {
	uid            types.UID
	desired, owned [sha256.Size]byte
}

// ensure applies desired unless the live child already holds it, and leaves the child as
// the API server has it in live. owner (optional) must control a child that exists. adjust
// (optional) leaves out of desired what others have taken over; owns reports whether sless
// holds a field path of the live child (every path, when the child does not exist yet).
func ensure[T client.Object](ctx context.Context, c *children, owner metav1.Object, desired, live T,
	adjust func(desired T, owns func(path ...string) bool)) error {
	gvk, err := apiutil.GVKForObject(desired, c.Scheme())
	if err != nil {
		return fmt.Errorf("kind of %s: %w", client.ObjectKeyFromObject(desired), err)
	}
	kind, key := gvk.Kind, childKey{gvk, client.ObjectKeyFromObject(desired)}
	err = c.Get(ctx, key.NamespacedName, live)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("getting %s %s: %w", kind, key.NamespacedName, err)
	}
	if exists && owner != nil && !metav1.IsControlledBy(live, owner) {
		return &NotOwnedError{Kind: kind, Namespace: key.Namespace, Name: key.Name}
	}
	owned := ownedFields(live)
	if adjust != nil {
		adjust(desired, func(path ...string) bool { return !exists || owned.has(path...) })
	}
	u, err := applyObject(desired, gvk)
	if err != nil {
		return fmt.Errorf("rendering %s %s for apply: %w", kind, key.NamespacedName, err)
	}
	want, err := hashOf(u.Object)
	if err != nil {
		return err
	}
	if exists {
		if last, ok := c.applied.Get(key); ok {
			if st := last.(appliedState); st.uid == live.GetUID() && st.desired == want && st.owned == owned.hash {
				return nil
			}
		}
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), fieldOwner, client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", kind, key.NamespacedName, err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, live); err != nil {
		return fmt.Errorf("reading the applied %s %s: %w", kind, key.NamespacedName, err)
	}
	c.applied.Add(key, appliedState{uid: live.GetUID(), desired: want, owned: ownedFields(live).hash})
	log.FromContext(ctx).V(1).Info("applied child", "kind", kind, "name", key.Name, "created", !exists)
	return nil
}

// applyObject is a rendered object as an apply configuration: its kind set, no status (the
// owners of status write it), and no null fields, which a typed object has wherever a
// pointer is unset (creationTimestamp) and which an apply would read as fields sless sets.
func applyObject(obj client.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(m, "status")
	u := &unstructured.Unstructured{Object: dropNulls(m).(map[string]any)}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

func dropNulls(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if e == nil {
				delete(v, k)
				continue
			}
			v[k] = dropNulls(e)
		}
	case []any:
		for i, e := range v {
			v[i] = dropNulls(e)
		}
	}
	return v
}

// fieldSet is sless's entry in an object's managedFields (the FieldsV1 tree) and its hash.
type fieldSet struct {
	tree map[string]any
	hash [sha256.Size]byte
}

// ownedFields finds the fields the operator's applies hold in obj.
func ownedFields(obj client.Object) fieldSet {
	for _, e := range obj.GetManagedFields() {
		if e.Manager != string(fieldOwner) || e.Operation != metav1.ManagedFieldsOperationApply || e.Subresource != "" || e.FieldsV1 == nil {
			continue
		}
		var tree map[string]any
		if json.Unmarshal(e.FieldsV1.GetRawBytes(), &tree) != nil {
			return fieldSet{}
		}
		h, _ := hashOf(tree) // re-encoded: the cache and an apply's answer may order keys apart
		return fieldSet{tree: tree, hash: h}
	}
	return fieldSet{}
}

// has reports whether the set holds the field at path (e.g. "spec", "replicas").
func (s fieldSet) has(path ...string) bool {
	node := s.tree
	for _, p := range path {
		next, ok := node["f:"+p].(map[string]any)
		if !ok {
			return false
		}
		node = next
	}
	return node != nil
}

func hashOf(v any) ([sha256.Size]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(b), nil
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
