package reconcilers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	httpv1alpha1 "github.com/kedacore/http-add-on/operator/apis/http/v1alpha1"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
)

// +kubebuilder:rbac:groups=sless.dev,resources=functions;triggers;functionjobs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sless.dev,resources=functions/status;triggers/status;functionjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sless.dev,resources=functions/finalizers;triggers/finalizers;functionjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups=sless.dev,resources=revisions,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=sless.dev,resources=revisions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups=http.keda.sh,resources=httpscaledobjects,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete

// FunctionReconciler builds a Function's source into an image and renders the Deployment,
// Service and HTTPScaledObject that run it.
type FunctionReconciler struct {
	client.Client
	Config
	builds   builds
	children *children
	// resolver turns spec.image's tag into a digest.
	resolver resolver
	// Recorder gets an Event for each transition of the Ready dependents (nil: none).
	Recorder events.EventRecorder
}

// Reconcile implements reconcile.Reconciler.
func (r *FunctionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	fn := &v1.Function{}
	if err := r.Get(ctx, req.NamespacedName, fn); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !fn.DeletionTimestamp.IsZero() {
		if err := r.deleteAsync(ctx, fn); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, finalize(ctx, r.Client, r.Artifacts, r.builds, fn, scaling.LabelFunction)
	}
	if controllerutil.AddFinalizer(fn, finalizer) {
		if err := r.Update(ctx, fn); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer to function %s: %w", req.NamespacedName, err)
		}
	}
	before := conditionStates(fn.Status.Conditions)
	err := reconcileStatus(ctx, r.Client, "function", fn, r.reconcileFunction,
		func(o *v1.Function) (any, *int64) { return &o.Status, &o.Status.ObservedGeneration })
	recordTransitions(r.Recorder, fn, before)
	return result(err)
}

// retryAfter asks for another reconcile after a delay without reporting an error: the
// status already says what is waited for.
type retryAfter time.Duration

func (r retryAfter) Error() string { return "retry after " + time.Duration(r).String() }

// sooner is the more urgent of two reconcile outcomes: an error, else the shorter retryAfter.
func sooner(a, b error) error {
	var wa, wb retryAfter
	switch {
	case a == nil || errors.As(a, &wa) && errors.As(b, &wb) && wb < wa:
		return b
	case b == nil || errors.As(b, &wb):
		return a
	}
	return b
}

// result is what a reconcile that ended with err asks of the controller.
func result(err error) (ctrl.Result, error) {
	var wait retryAfter
	if errors.As(err, &wait) {
		return ctrl.Result{RequeueAfter: time.Duration(wait)}, nil
	}
	return ctrl.Result{}, err
}

func (r *FunctionReconciler) reconcileFunction(ctx context.Context, fn *v1.Function) error {
	st, gen := &fn.Status, fn.Generation
	st.URL = rules.FunctionURL(r.Options.GatewayURL, fn.Namespace, fn.Name)
	st.RoutingHost = rules.RoutingHost(fn.Namespace, fn.Name, r.Options.Domain)
	defer st.DeriveReady(gen, "serving at "+st.URL)

	if err := r.reconcileIsolation(ctx, fn); err != nil {
		st.MarkCondition(gen, v1.ConditionDeployed, metav1.ConditionFalse, v1.ReasonDeployFailed, err.Error())
		return err
	}
	err := r.reconcileImage(ctx, fn)
	var wait retryAfter
	if err != nil && !errors.As(err, &wait) {
		st.MarkCondition(gen, v1.ConditionBuilt, metav1.ConditionFalse, v1.ReasonBuildError, err.Error())
		return err
	}
	missing, werr := r.reconcileRevisions(ctx, fn)
	if werr != nil && !errors.As(werr, &wait) {
		st.MarkCondition(gen, v1.ConditionDeployed, metav1.ConditionFalse, v1.ReasonDeployFailed, werr.Error())
		return werr
	}
	err = sooner(err, werr)
	if st.Image == "" {
		st.MarkCondition(gen, v1.ConditionDeployed, metav1.ConditionFalse, v1.ReasonNoImage, "no image built yet")
		st.MarkCondition(gen, v1.ConditionHealthy, metav1.ConditionUnknown, v1.ReasonNotDeployed, "nothing runs yet")
		return err
	}
	if missing != "" {
		// The revision's objects are left as they are: pods already running keep serving,
		// and no pod is rendered that could not start.
		st.MarkCondition(gen, v1.ConditionDeployed, metav1.ConditionFalse, v1.ReasonSecretNotFound, missing)
		return err
	}
	if serr := r.reconcileSecretReader(ctx, fn); serr != nil {
		st.MarkCondition(gen, v1.ConditionDeployed, metav1.ConditionFalse, v1.ReasonDeployFailed, serr.Error())
		return serr
	}
	st.MarkCondition(gen, v1.ConditionDeployed, metav1.ConditionTrue, v1.ReasonDeployed, "every serving revision's Deployment, Service and HTTPScaledObject are up to date")
	// Built and deployed, but pods that cannot run their image are never a silent Ready.
	if reason, msg := r.podTrouble(ctx, fn); reason != "" {
		st.MarkCondition(gen, v1.ConditionHealthy, metav1.ConditionFalse, reason, msg)
	} else {
		st.MarkCondition(gen, v1.ConditionHealthy, metav1.ConditionTrue, v1.ReasonPodsHealthy, "no pod reports a pull error or a crash loop")
	}
	if aerr := r.reconcileAsync(ctx, fn); aerr != nil {
		return aerr
	}
	return err
}

// reconcileImage settles status.image and the Built condition for the current source: a
// prebuilt image (its tag resolved to a digest, prebuiltImage), the image already built from
// this source, or a kaniko build. A failed build is not retried for the same source; a new
// upload (new hash) builds again. While a new source builds or after it failed, the previous
// image keeps serving.
func (r *FunctionReconciler) reconcileImage(ctx context.Context, fn *v1.Function) error {
	st, gen := &fn.Status, fn.Generation
	built := func(status metav1.ConditionStatus, reason, msg string) {
		st.MarkCondition(gen, v1.ConditionBuilt, status, reason, msg)
	}
	switch src := fn.Spec.Source; {
	case fn.Spec.Image != "":
		return r.prebuiltImage(ctx, fn)
	case src == nil:
		built(metav1.ConditionFalse, v1.ReasonAwaitingSource, "upload code to build the function")
		return nil
	case src.SHA256 == st.BuiltSHA256 && st.Image != "":
		built(metav1.ConditionTrue, v1.ReasonBuilt, "image "+st.Image)
		return nil
	case src.SHA256 == st.LastBuildSHA256 && st.LastBuildError != "":
		return r.failedBuild(ctx, fn)
	}
	res, err := r.builds.ensure(ctx, r.buildTarget(fn))
	if err != nil {
		return err
	}
	switch res.state {
	case buildSucceeded:
		st.Image, st.BuiltSHA256, st.LastBuildSHA256, st.LastBuildError = res.image, fn.Spec.Source.SHA256, fn.Spec.Source.SHA256, ""
		st.LastBuildTime = finishedAt(res.job)
		log.FromContext(ctx).Info("build succeeded", "image", res.image)
		built(metav1.ConditionTrue, v1.ReasonBuilt, "image "+st.Image)
		return nil
	case buildFailed:
		mask, err := secretMasker(ctx, r.Client, fn.Namespace, &fn.Spec.CodeSpec)
		if err != nil {
			return err
		}
		res.message = mask.Mask(res.message)
		st.LastBuildSHA256, st.LastBuildError = fn.Spec.Source.SHA256, res.message
		st.LastBuildTime = finishedAt(res.job)
		log.FromContext(ctx).Info("build failed", "job", res.job.Name, "unreachableRegistry", res.unreachable)
		if res.unreachable != "" {
			st.LastBuildError = "registry " + res.unreachable + " is unreachable; the build is retried every " + registryRetryDelay.String() + ":\n" + res.message
			built(metav1.ConditionFalse, v1.ReasonRegistryUnavailable, st.LastBuildError)
			return retryAfter(registryRetryDelay)
		}
		built(metav1.ConditionFalse, v1.ReasonBuildFailed, res.message)
		return nil
	case buildQueued:
		built(metav1.ConditionFalse, v1.ReasonBuilding, res.message)
		return retryAfter(queueRecheck) // a finished build wakes it sooner (builds.owner)
	}
	built(metav1.ConditionFalse, v1.ReasonBuilding, "build job "+res.job.Name+" is building the source")
	return nil
}

func (r *FunctionReconciler) buildTarget(fn *v1.Function) scaling.BuildTarget {
	return scaling.BuildTarget{Namespace: fn.Namespace, Name: fn.Name, Label: scaling.LabelFunction, Source: *fn.Spec.Source}
}

// failedBuild settles a Function whose current source failed to build: for good, unless the
// build only failed to reach a registry, which is retried once registryRetryDelay passed.
func (r *FunctionReconciler) failedBuild(ctx context.Context, fn *v1.Function) error {
	st, gen := &fn.Status, fn.Generation
	built := meta.FindStatusCondition(st.Conditions, v1.ConditionBuilt)
	if built == nil || built.Reason != v1.ReasonRegistryUnavailable {
		st.MarkCondition(gen, v1.ConditionBuilt, metav1.ConditionFalse, v1.ReasonBuildFailed, st.LastBuildError)
		return nil
	}
	if st.LastBuildTime != nil {
		if wait := registryRetryDelay - time.Since(st.LastBuildTime.Time); wait > 0 {
			return retryAfter(wait)
		}
	}
	if err := r.builds.retry(ctx, r.buildTarget(fn)); err != nil {
		return err
	}
	log.FromContext(ctx).Info("retrying a build that could not reach a registry")
	st.LastBuildError = ""
	st.MarkCondition(gen, v1.ConditionBuilt, metav1.ConditionFalse, v1.ReasonBuilding, "retrying the build: "+firstLine(built.Message))
	// The next pass starts the build; a moment lets the cache drop the deleted Job.
	return retryAfter(2 * time.Second)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func finishedAt(job *batchv1.Job) *metav1.Time {
	if job.Status.CompletionTime != nil {
		return job.Status.CompletionTime.DeepCopy()
	}
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed {
			return c.LastTransitionTime.DeepCopy()
		}
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	return &now
}

// reconcileSecretReader lets fn's dispatchers read the secrets fn references
// (scaling.MakeSecretReaderRole), and removes that access once it references none.
func (r *FunctionReconciler) reconcileSecretReader(ctx context.Context, fn *v1.Function) error {
	role := scaling.MakeSecretReaderRole(fn)
	if role == nil {
		key := types.NamespacedName{Namespace: fn.Namespace, Name: scaling.SecretReaderName(fn)}
		for _, obj := range []client.Object{&rbacv1.RoleBinding{}, &rbacv1.Role{}, &corev1.ServiceAccount{}} {
			err := r.Get(ctx, key, obj) // from the cache: nothing to delete costs no request
			if err == nil {
				err = r.Delete(ctx, obj)
			}
			if client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("removing %T %s, which read the secrets function %s no longer references: %w", obj, key, fn.Name, err)
			}
		}
		return nil
	}
	if err := ensure(ctx, r.children, fn, scaling.MakeSecretReaderServiceAccount(fn), &corev1.ServiceAccount{}, nil); err != nil {
		return err
	}
	if err := ensure(ctx, r.children, fn, role, &rbacv1.Role{}, nil); err != nil {
		return err
	}
	return ensure(ctx, r.children, fn, scaling.MakeSecretReaderRoleBinding(fn, r.Options), &rbacv1.RoleBinding{}, nil)
}

// secretVersions reads the versions of the secrets code references (the secrets API's
// Secrets only, labelled rules.SecretLabel: a tenant cannot hand its function another Secret
// of its namespace), or says which secret or key is missing.
func secretVersions(ctx context.Context, c client.Reader, ns string, code *v1.CodeSpec) (map[string]int64, string) {
	versions := map[string]int64{}
	secrets := map[string]*corev1.Secret{}
	lookup := func(name string) (*corev1.Secret, string) {
		if s, ok := secrets[name]; ok {
			return s, ""
		}
		s, missing := slessSecret(ctx, c, ns, name)
		if missing != "" {
			return nil, missing
		}
		secrets[name] = s
		versions[name], _ = strconv.ParseInt(s.Annotations[rules.SecretVersionAnnotation], 10, 64)
		return s, ""
	}
	for _, ref := range code.SecretEnv {
		s, missing := lookup(ref.Secret)
		if missing != "" {
			return nil, missing
		}
		if missing := missingKey(s, ref.Key, "the reference of "+ref.Name); missing != "" {
			return nil, missing
		}
	}
	for _, ref := range code.SecretFiles {
		if _, missing := lookup(ref.Secret); missing != "" {
			return nil, missing
		}
	}
	return versions, ""
}

// slessSecret reads the secrets API's Secret name of namespace ns (labelled
// rules.SecretLabel), or says it does not exist.
func slessSecret(ctx context.Context, c client.Reader, ns, name string) (*corev1.Secret, string) {
	s := &corev1.Secret{}
	err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s)
	if err != nil || s.Labels[rules.SecretLabel] != "true" || !s.DeletionTimestamp.IsZero() {
		return nil, fmt.Sprintf("secret %q does not exist in namespace %s: create it (sless secret create %s --from-literal KEY=value) or remove the reference", name, ns, name)
	}
	return s, ""
}

// secretMasker masks the current values of the sless secrets code references: what a
// build or a run of it printed (a termination message) reaches a status, a condition and an
// Event only through it. A secret that cannot be read is an error (retried): the text waits
// rather than going out unmasked.
func secretMasker(ctx context.Context, c client.Reader, ns string, code *v1.CodeSpec) (*rules.SecretMasker, error) {
	var values [][]byte
	for _, name := range code.SecretNames() {
		s := &corev1.Secret{}
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading secret %s/%s to mask its values: %w", ns, name, err)
		case s.Labels[rules.SecretLabel] == "true":
			values = slices.AppendSeq(values, maps.Values(s.Data))
		}
	}
	return rules.NewSecretMasker(values), nil
}

// missingKey says that s lacks key, which user (a reference) needs; "" when it has it.
func missingKey(s *corev1.Secret, key, user string) string {
	if _, ok := s.Data[key]; ok {
		return ""
	}
	return fmt.Sprintf("secret %q has no key %q (it has %s): add the key or change %s", s.Name, key, strings.Join(slices.Sorted(maps.Keys(s.Data)), ", "), user)
}

// secretRefIndex indexes Functions by the secrets they reference, so a rotated secret wakes
// exactly the functions that read it.
const secretRefIndex = "spec.secretRefs"

// syncScaledObjectPause carries the paused-replicas annotation onto the ScaledObject the
// add-on generates from the HTTPScaledObject (same name). The add-on (v0.15) copies
// annotations only when it reconciles, which an annotation change does not trigger, and its
// merge patch never removes one: without this a disabled http trigger would not pause KEDA
// and a re-enabled one would stay paused (found by test/e2e on the real add-on).
func (r *FunctionReconciler) syncScaledObjectPause(ctx context.Context, key types.NamespacedName, paused bool) error {
	so := &kedav1alpha1.ScaledObject{}
	err := r.Get(ctx, key, so)
	if apierrors.IsNotFound(err) {
		return nil // the add-on creates it with the HTTPScaledObject's annotations
	}
	if err != nil {
		return fmt.Errorf("getting ScaledObject %s: %w", key, err)
	}
	value, has := so.Annotations[scaling.AnnotationPausedReplicas]
	if paused == (has && value == "0") && (paused || !has) {
		return nil
	}
	var want any // JSON null removes the annotation
	if paused {
		want = "0"
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{scaling.AnnotationPausedReplicas: want}}})
	if err != nil {
		return err
	}
	if err := r.Patch(ctx, so, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("setting paused=%t on ScaledObject %s: %w", paused, key, err)
	}
	return nil
}

// httpPaused reports whether the function's HTTP traffic is frozen: it has http triggers and
// every one of them is disabled. A function without http triggers stays reachable.
func (r *FunctionReconciler) httpPaused(ctx context.Context, fn *v1.Function) (bool, error) {
	var triggers v1.TriggerList
	if err := r.List(ctx, &triggers, client.InNamespace(fn.Namespace), client.MatchingFields{functionRefIndex: fn.Name}); err != nil {
		return false, fmt.Errorf("listing triggers of function %s/%s: %w", fn.Namespace, fn.Name, err)
	}
	return scaling.HTTPGate(triggers.Items).Disabled, nil
}

// SetupWithManager watches Functions, their revisions and what runs them, their build Jobs
// (by label: they live in another namespace), their pods' troubles and their http Triggers
// (which pause the HTTPScaledObjects).
func (r *FunctionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.Function{}, builder.WithPredicates(specChanged)).
		// Revisions change only by the reconciler's own writes; a deletion by hand is news.
		Owns(&v1.Revision{}, builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false },
			UpdateFunc: func(event.UpdateEvent) bool { return false },
		})).
		// A revision's objects are owned by the revision, labelled with the function.
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(labelledFunction), builder.WithPredicates(notCreated)).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(labelledFunction), builder.WithPredicates(notCreated)).
		Watches(&httpv1alpha1.HTTPScaledObject{}, handler.EnqueueRequestsFromMapFunc(labelledFunction), builder.WithPredicates(notCreated)).
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(r.builds.owner(scaling.LabelFunction)), builder.WithPredicates(notCreated)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podFunction), builder.WithPredicates(podTroubleChanged)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(referrers(r.Client, func() client.ObjectList { return &v1.FunctionList{} }, secretRefIndex))).
		// Its identity Secret: one deleted by hand is written again.
		Owns(&corev1.Secret{}, builder.WithPredicates(notCreated)).
		// The add-on merge-patches the HTTPScaledObject's annotations onto the ScaledObject it
		// generates whenever it reconciles, from its own cache: a stale pass re-adds the paused
		// annotation syncScaledObjectPause just removed. Its annotation changes wake the
		// Function (the add-on copies the HTTPScaledObject's labels) to set it right again.
		Watches(&kedav1alpha1.ScaledObject{}, handler.EnqueueRequestsFromMapFunc(labelledFunction),
			builder.WithPredicates(notCreated, predicate.AnnotationChangedPredicate{})).
		Watches(&v1.Trigger{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			t := o.(*v1.Trigger)
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: t.Spec.FunctionRef.Name}}}
		})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Workers}).
		Named("function").
		Complete(r)
}

// labelledFunction maps a revision's object (labelled with its revision and function) to
// the Function.
func labelledFunction(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[scaling.LabelRevision] == "" || l[scaling.LabelFunction] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: l[scaling.LabelFunction]}}}
}

// owner maps a build Job to the object of kind label it builds, identified by its labels,
// and any change of a build Job (it ran, ended, went) to the builds of that kind waiting
// for a slot.
func (b builds) owner(label string) handler.MapFunc {
	return func(_ context.Context, o client.Object) []reconcile.Request {
		reqs := b.queue.next(label)
		l := o.GetLabels()
		if ns, name := l[scaling.LabelFunctionNamespace], l[label]; ns != "" && name != "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
		}
		return reqs
	}
}

// setCondition sets a condition stamped with the object's generation; the transition time
// moves only when the status flips.
func setCondition(obj metav1.Object, conds *[]metav1.Condition, t string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(conds, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: obj.GetGeneration()})
}
