package reconcilers

import (
	"context"
	"fmt"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/imagepolicy"
	"sless.dev/sless/scaling"
)

// FunctionJobReconciler runs a function once per runID: runID 0 is Skipped, raising it runs
// again. Self-contained jobs are built like Functions first.
type FunctionJobReconciler struct {
	client.Client
	Reader client.Reader // uncached, for the run's pod
	Config
	builds   builds
	policy   imagepolicy.Policy
	children *children
}

// Reconcile implements reconcile.Reconciler.
func (r *FunctionJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	fj := &v1.FunctionJob{}
	if err := r.Get(ctx, req.NamespacedName, fj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !fj.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, finalize(ctx, r.Client, r.Artifacts, r.builds, fj, scaling.LabelJob)
	}
	if fj.Spec.FunctionRef == nil && controllerutil.AddFinalizer(fj, finalizer) {
		if err := r.Update(ctx, fj); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer to function job %s: %w", req.NamespacedName, err)
		}
	}
	return result(reconcileStatus(ctx, r.Client, "function job", fj, r.reconcileJob,
		func(o *v1.FunctionJob) (any, *int64) { return &o.Status, &o.Status.ObservedGeneration }))
}

func (r *FunctionJobReconciler) reconcileJob(ctx context.Context, fj *v1.FunctionJob) error {
	st := &fj.Status
	if fj.Spec.RunID == 0 {
		st.Phase, st.ObservedRunID = v1.JobSkipped, 0
		setCondition(fj, &st.Conditions, v1.ConditionSucceeded, metav1.ConditionFalse, v1.ReasonSkipped, "runID is 0: raise it to run the job")
		return nil
	}
	if st.ObservedRunID != fj.Spec.RunID {
		// A new run: forget the previous run's outcome.
		*st = v1.FunctionJobStatus{Image: st.Image, BuiltSHA256: st.BuiltSHA256, LastBuildSHA256: st.LastBuildSHA256,
			ObservedRunID: fj.Spec.RunID, Phase: v1.JobPending, Conditions: st.Conditions}
	}
	if st.Phase == v1.JobSucceeded || st.Phase == v1.JobFailed {
		return nil
	}
	code, image, waiting, err := r.resolve(ctx, fj)
	if err != nil || waiting != "" {
		return err
	}
	return r.run(ctx, fj, code, image)
}

// resolve finds the code and image to run. waiting explains why the run cannot start yet
// (the status says so); the watches on Functions and build Jobs bring the job back.
func (r *FunctionJobReconciler) resolve(ctx context.Context, fj *v1.FunctionJob) (code *v1.CodeSpec, image, waiting string, err error) {
	st := &fj.Status
	if ref := fj.Spec.FunctionRef; ref != nil {
		fn := &v1.Function{}
		err := r.Get(ctx, client.ObjectKey{Namespace: fj.Namespace, Name: ref.Name}, fn)
		switch {
		case apierrors.IsNotFound(err):
			waiting = fmt.Sprintf("function %q does not exist in namespace %s; the job runs when it does", ref.Name, fj.Namespace)
		case err != nil:
			return nil, "", "", fmt.Errorf("getting function %s of job %s: %w", ref.Name, fj.Name, err)
		case !functionReady(fn):
			waiting = fmt.Sprintf("function %q is %s; the job runs when it is Ready", fn.Name, phaseOf(fn))
		}
		if waiting != "" {
			st.Phase = v1.JobPending
			setCondition(fj, &st.Conditions, v1.ConditionSucceeded, metav1.ConditionUnknown, v1.ReasonWaitingForFunction, waiting)
			return nil, "", waiting, nil
		}
		st.Image = fn.Status.Image
		return &fn.Spec.CodeSpec, fn.Status.Image, "", nil
	}
	code = &fj.Spec.CodeSpec
	switch {
	case code.Image != "":
		// Run as given (no tag resolution), but only what the policy lets the namespace run.
		ref, err := name.ParseReference(code.Image)
		if err == nil {
			err = r.policy.Check(ref, fj.Namespace)
		}
		if err != nil {
			r.finish(fj, v1.JobFailed, v1.ReasonImageNotAllowed, "", "spec.image "+code.Image+" is not allowed: "+err.Error(), "not run")
			return nil, "", "image not allowed", nil
		}
		st.Image = code.Image
		return code, code.Image, "", nil
	case code.Source == nil:
		st.Phase = v1.JobPending
		setCondition(fj, &st.Conditions, v1.ConditionSucceeded, metav1.ConditionUnknown, v1.ReasonAwaitingSource, "upload the job's code to build and run it")
		return nil, "", "awaiting source", nil
	case code.Source.SHA256 == st.BuiltSHA256 && st.Image != "":
		return code, st.Image, "", nil
	}
	res, err := r.builds.ensure(ctx, scaling.BuildTarget{Namespace: fj.Namespace, Name: fj.Name, Label: scaling.LabelJob, Source: *code.Source})
	if err != nil {
		return nil, "", "", err
	}
	switch res.state {
	case buildSucceeded:
		st.Image, st.BuiltSHA256, st.LastBuildSHA256 = res.image, code.Source.SHA256, code.Source.SHA256
		return code, res.image, "", nil
	case buildFailed:
		mask, err := secretMasker(ctx, r.Client, fj.Namespace, code)
		if err != nil {
			return nil, "", "", err
		}
		st.LastBuildSHA256 = code.Source.SHA256
		r.finish(fj, v1.JobFailed, v1.ReasonBuildFailed, "", mask.Mask(res.message), "build failed")
		return nil, "", "build failed", nil
	case buildQueued:
		st.Phase = v1.JobBuilding
		setCondition(fj, &st.Conditions, v1.ConditionSucceeded, metav1.ConditionUnknown, v1.ReasonBuilding, res.message)
		return nil, "", "queued", retryAfter(queueRecheck) // a finished build wakes it sooner (builds.owner)
	}
	st.Phase = v1.JobBuilding
	setCondition(fj, &st.Conditions, v1.ConditionSucceeded, metav1.ConditionUnknown, v1.ReasonBuilding, "build job "+res.job.Name+" is building the source")
	return nil, "", "building", nil
}

// run starts the run's Job unless it exists and copies its outcome into the status.
func (r *FunctionJobReconciler) run(ctx context.Context, fj *v1.FunctionJob, code *v1.CodeSpec, image string) error {
	st := &fj.Status
	job := &batchv1.Job{}
	desired := scaling.MakeRunJob(fj, code, image, r.Options)
	err := r.Get(ctx, client.ObjectKeyFromObject(desired), job)
	if apierrors.IsNotFound(err) {
		// The run executes the tenant's code: its namespace's NetworkPolicies first.
		if err := ensureNetworkPolicies(ctx, r.children, fj.Namespace, r.Options); err != nil {
			return err
		}
		if err := r.Create(ctx, desired); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating job %s: %w", desired.Name, err)
		}
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		st.Phase, st.StartTime = v1.JobRunning, &now
		setCondition(fj, &st.Conditions, v1.ConditionSucceeded, metav1.ConditionUnknown, v1.ReasonRunning, "job "+desired.Name+" is running")
		log.FromContext(ctx).Info("run started", "job", desired.Name, "runID", fj.Spec.RunID)
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting job %s: %w", desired.Name, err)
	}
	if st.StartTime == nil {
		st.StartTime = job.Status.StartTime.DeepCopy()
	}
	switch {
	case jobCondition(job, batchv1.JobComplete):
		return r.finishRun(ctx, fj, code, job, v1.JobSucceeded)
	case jobCondition(job, batchv1.JobFailed):
		return r.finishRun(ctx, fj, code, job, v1.JobFailed)
	default:
		st.Phase = v1.JobRunning
		setCondition(fj, &st.Conditions, v1.ConditionSucceeded, metav1.ConditionUnknown, v1.ReasonRunning, "job "+job.Name+" is running")
	}
	return nil
}

// finishRun records a finished run: the termination message is the handler's result (or its
// error JSON) with the values of code's secrets masked, and the duration is the container's
// own run time when the pod reports it.
func (r *FunctionJobReconciler) finishRun(ctx context.Context, fj *v1.FunctionJob, code *v1.CodeSpec, job *batchv1.Job, phase v1.JobPhase) error {
	mask, err := secretMasker(ctx, r.Client, fj.Namespace, code)
	if err != nil {
		return err
	}
	msg := mask.Mask(terminationMessage(ctx, r.Reader, job))
	st := &fj.Status
	if pod := newestPod(ctx, r.Reader, job); pod != nil {
		for _, cs := range pod.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && !t.StartedAt.IsZero() && !t.FinishedAt.IsZero() {
				st.DurationMillis = t.FinishedAt.Sub(t.StartedAt.Time).Milliseconds()
			}
		}
	}
	if st.DurationMillis == 0 && job.Status.StartTime != nil && job.Status.CompletionTime != nil {
		st.DurationMillis = job.Status.CompletionTime.Sub(job.Status.StartTime.Time).Milliseconds()
	}
	if phase == v1.JobSucceeded {
		r.finish(fj, phase, v1.ReasonSucceeded, msg, "", "the handler returned")
		return nil
	}
	r.finish(fj, phase, v1.ReasonRunFailed, "", msg, "the run failed")
	return nil
}

func (r *FunctionJobReconciler) finish(fj *v1.FunctionJob, phase v1.JobPhase, reason, result, errMsg, summary string) {
	st := &fj.Status
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	st.Phase, st.Result, st.Error, st.CompletionTime = phase, result, errMsg, &now
	if phase == v1.JobFailed {
		st.Output = errMsg
		setCondition(fj, &st.Conditions, v1.ConditionSucceeded, metav1.ConditionFalse, reason, summary+": "+errMsg)
		return
	}
	setCondition(fj, &st.Conditions, v1.ConditionSucceeded, metav1.ConditionTrue, reason, summary)
}

// SetupWithManager watches FunctionJobs, their run Jobs, their build Jobs and the Functions
// they reference.
func (r *FunctionJobReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.FunctionJob{}, builder.WithPredicates(specChanged)).
		Owns(&batchv1.Job{}, builder.WithPredicates(notCreated)).
		Watches(&batchv1.Job{}, handler.EnqueueRequestsFromMapFunc(r.builds.owner(scaling.LabelJob)), builder.WithPredicates(notCreated)).
		Watches(&v1.Function{}, handler.EnqueueRequestsFromMapFunc(referrers(r.Client, func() client.ObjectList { return &v1.FunctionJobList{} }, functionRefIndex))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Workers}).
		Named("functionjob").
		Complete(r)
}
