package reconcilers

import (
	"context"
	"fmt"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
	"sless.dev/sless/triggers"
)

// +kubebuilder:rbac:groups=batch,resources=cronjobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=keda.sh,resources=scaledjobs;triggerauthentications,verbs=get;list;watch;create;update;patch;delete

// TriggerReconciler renders what a trigger's kind has the operator run (kind.Cluster): a
// CronJob for a schedule (cron), a KEDA ScaledJob (+ TriggerAuthentication) for a scaler
// (event); a kind that routes (http) only reports its URL (its enabled flag pauses the
// Function's HTTPScaledObject, see FunctionReconciler).
type TriggerReconciler struct {
	client.Client
	Config
	warm     *warmers
	children *children
}

// Reconcile implements reconcile.Reconciler.
func (r *TriggerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	tr := &v1.Trigger{}
	if err := r.Get(ctx, req.NamespacedName, tr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !tr.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // children carry owner references
	}
	err := reconcileStatus(ctx, r.Client, "trigger", tr, r.reconcileTrigger,
		func(o *v1.Trigger) (any, *int64) { return &o.Status, &o.Status.ObservedGeneration })
	return result(err)
}

func (r *TriggerReconciler) reconcileTrigger(ctx context.Context, tr *v1.Trigger) error {
	st := &tr.Status
	fn := &v1.Function{}
	err := r.Get(ctx, client.ObjectKey{Namespace: tr.Namespace, Name: tr.Spec.FunctionRef.Name}, fn)
	if apierrors.IsNotFound(err) {
		st.Active = false
		setCondition(tr, &st.Conditions, v1.ConditionReady, metav1.ConditionFalse, v1.ReasonFunctionNotFound,
			fmt.Sprintf("function %q does not exist in namespace %s; the trigger starts when it does", tr.Spec.FunctionRef.Name, tr.Namespace))
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting function %s of trigger %s: %w", tr.Spec.FunctionRef.Name, tr.Name, err)
	}
	if !functionReady(fn) {
		// Existing children keep running the last good version; new ones wait for readiness.
		st.Active = false
		setCondition(tr, &st.Conditions, v1.ConditionReady, metav1.ConditionFalse, v1.ReasonFunctionNotReady,
			fmt.Sprintf("function %q is %s; the trigger starts when it is Ready", fn.Name, phaseOf(fn)))
		return nil
	}
	k, ok := triggers.Lookup(string(tr.Spec.Type))
	if !ok {
		return r.fail(tr, fmt.Errorf("unknown trigger type %q", tr.Spec.Type))
	}
	if k.Routes() {
		st.URL = fn.Status.URL
	}
	// A kind's secrets (an event trigger's broker URL) come from the secrets API, as a
	// function's secrets do: a trigger cannot make KEDA and the dispatcher read another
	// Secret of its namespace.
	if missing := r.secretMissing(ctx, tr); missing != "" {
		st.Active = false
		setCondition(tr, &st.Conditions, v1.ConditionReady, metav1.ConditionFalse, v1.ReasonSecretNotFound, missing)
		return nil
	}
	plan := k.Cluster(tr.Spec)
	if plan.Schedule != nil {
		live := &batchv1.CronJob{}
		if err := ensure(ctx, r.children, tr, scaling.MakeCronJob(tr, fn, r.Options), live, nil); err != nil {
			return r.fail(tr, err)
		}
		if live.Status.LastScheduleTime != nil {
			st.LastFireTime = live.Status.LastScheduleTime.DeepCopy()
		}
	}
	if plan.Scaler != nil {
		if err := ensure(ctx, r.children, tr, scaling.MakeTriggerAuthentication(tr), &kedav1alpha1.TriggerAuthentication{}, nil); err != nil {
			return r.fail(tr, err)
		}
		sj := &kedav1alpha1.ScaledJob{}
		if err := ensure(ctx, r.children, tr, scaling.MakeScaledJob(tr, fn, r.Options), sj, nil); err != nil {
			return r.fail(tr, err)
		}
		if sj.Status.LastActiveTime != nil {
			st.LastFireTime = sj.Status.LastActiveTime.DeepCopy()
		}
	}
	st.Active = tr.Spec.IsEnabled()
	if st.Active {
		setCondition(tr, &st.Conditions, v1.ConditionReady, metav1.ConditionTrue, v1.ReasonActive, "firing function "+fn.Name)
	} else {
		setCondition(tr, &st.Conditions, v1.ConditionReady, metav1.ConditionFalse, v1.ReasonDisabled, "enabled is false: frozen in place")
	}
	return r.prewarm(tr, fn, plan.Schedule, time.Now())
}

// secretMissing says which secret or key the trigger's kind reads (an event trigger's broker
// secret) does not exist.
func (r *TriggerReconciler) secretMissing(ctx context.Context, tr *v1.Trigger) string {
	for _, ref := range triggers.SecretRefs(triggers.FromCRD(tr.Spec)) {
		s, missing := slessSecret(ctx, r.Client, tr.Namespace, ref.Secret)
		if missing != "" {
			return ref.Field + ": " + missing
		}
		if missing := missingKey(s, ref.Key, ref.KeyField); missing != "" {
			return missing
		}
	}
	return ""
}

func (r *TriggerReconciler) fail(tr *v1.Trigger, err error) error {
	tr.Status.Active = false
	setCondition(tr, &tr.Status.Conditions, v1.ConditionReady, metav1.ConditionFalse, v1.ReasonRenderFailed, err.Error())
	return err
}

// functionReady is true when the function is Ready for its current generation (a stale
// Ready from an older one does not count) and has an image to run.
func functionReady(fn *v1.Function) bool {
	ready := meta.IsStatusConditionTrue(fn.Status.Conditions, v1.ConditionReady) && fn.Status.Image != ""
	return rules.FunctionReady(ready, fn.Generation, fn.Status.ObservedGeneration)
}

func phaseOf(fn *v1.Function) v1.FunctionPhase {
	if fn.Status.Phase == "" {
		return v1.FunctionPending
	}
	return fn.Status.Phase
}

func triggerList() client.ObjectList { return &v1.TriggerList{} }

// SetupWithManager watches Triggers, their children, and the Functions they reference.
func (r *TriggerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.Trigger{}, builder.WithPredicates(specChanged)).
		Owns(&batchv1.CronJob{}, builder.WithPredicates(notCreated)).
		Owns(&kedav1alpha1.ScaledJob{}, builder.WithPredicates(notCreated)).
		Owns(&kedav1alpha1.TriggerAuthentication{}, builder.WithPredicates(notCreated)).
		Watches(&v1.Function{}, handler.EnqueueRequestsFromMapFunc(referrers(r.Client, triggerList, functionRefIndex))).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(referrers(r.Client, triggerList, triggerSecretIndex))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Workers}).
		Named("trigger").
		Complete(r)
}
