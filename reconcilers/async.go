package reconcilers

import (
	"context"
	"fmt"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
)

// +kubebuilder:rbac:groups=keda.sh,resources=scaledjobs;triggerauthentications,verbs=get;list;watch;create;update;patch;delete

// reconcileAsync renders the dispatcher that drains fn's asynchronous invocations while
// async is enabled and the function is deployed, and removes it otherwise; the Async
// condition says which (absent when async is off).
func (r *FunctionReconciler) reconcileAsync(ctx context.Context, fn *v1.Function) error {
	st, gen := &fn.Status, fn.Generation
	switch {
	case !fn.Spec.Async.Enabled:
		if !meta.RemoveStatusCondition(&st.Conditions, v1.ConditionAsync) {
			return nil // never enabled, or already cleaned up: no API calls in the steady state
		}
		return r.deleteAsync(ctx, fn)
	case r.Options.AsyncSecret == "":
		st.MarkCondition(gen, v1.ConditionAsync, metav1.ConditionFalse, v1.ReasonAsyncNotConfigured,
			"this platform takes no asynchronous invocations: the operator runs without --async-secret")
		return nil
	case st.Image == "":
		st.MarkCondition(gen, v1.ConditionAsync, metav1.ConditionFalse, v1.ReasonNotDeployed, "waiting for the function's first image")
		return nil
	}
	if err := ensure(ctx, r.children, nil, scaling.MakeAsyncTriggerAuthentication(fn, r.Options), &kedav1alpha1.TriggerAuthentication{}, nil); err != nil {
		return err
	}
	if err := ensure(ctx, r.children, nil, scaling.MakeAsyncScaledJob(fn, r.Options), &kedav1alpha1.ScaledJob{}, nil); err != nil {
		return err
	}
	st.MarkCondition(gen, v1.ConditionAsync, metav1.ConditionTrue, v1.ReasonAsyncDraining,
		"dispatcher jobs drain "+rules.AsyncQueue(fn.Namespace, fn.Name))
	return nil
}

// deleteAsync removes fn's asynchronous dispatcher objects (none is fine). The queue stays:
// calls already accepted run when async is enabled again.
func (r *FunctionReconciler) deleteAsync(ctx context.Context, fn *v1.Function) error {
	for _, obj := range []client.Object{&kedav1alpha1.ScaledJob{}, &kedav1alpha1.TriggerAuthentication{}} {
		obj.SetNamespace(r.Options.Build.Namespace)
		obj.SetName(scaling.AsyncName(fn.Namespace, fn.Name))
		if err := r.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the asynchronous dispatcher %T of %s/%s: %w", obj, fn.Namespace, fn.Name, err)
		}
	}
	return nil
}
