package reconcilers

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"sless.dev/sless/scaling"
)

// buildState is where the image build of one source stands.
type buildState int

const (
	buildRunning buildState = iota
	buildQueued             // waiting for a slot (buildQueue); message says where
	buildSucceeded
	buildFailed
)

// buildResult is the outcome of ensureBuild.
type buildResult struct {
	state   buildState
	image   string
	message string // failure reason and log tail, or the place in the queue
	job     *batchv1.Job
	// unreachable names the registry a failed build could not reach: the failure says
	// nothing about the source, so the build is retried (retryBuild).
	unreachable string
}

// registryRetryDelay spaces the builds retried while a registry is unreachable (kaniko has
// already retried within each build).
var registryRetryDelay = 15 * time.Second

// builds runs build Jobs (scaling.MakeBuildJob) for Functions and self-contained
// FunctionJobs. Job names derive from the source hash, so a restarted operator finds the
// build it started instead of starting another.
type builds struct {
	client client.Client
	reader client.Reader // uncached: pods are read only when a build ends
	// kids applies the build pods' NetworkPolicy.
	kids  *children
	opts  scaling.Options
	queue *buildQueue // nil: no cap
}

func newBuilds(c client.Client, reader client.Reader, kids *children, opts scaling.Options) builds {
	return builds{client: c, reader: reader, kids: kids, opts: opts, queue: newBuildQueue(opts.Build.MaxConcurrent, c, opts.Build.Namespace)}
}

// ensure starts the build of t unless it exists, and reports how it stands.
func (b builds) ensure(ctx context.Context, t scaling.BuildTarget) (buildResult, error) {
	image, err := scaling.ImageFor(t, b.opts.Build)
	if err != nil {
		return buildResult{}, err
	}
	job := &batchv1.Job{}
	key := client.ObjectKey{Namespace: b.opts.Build.Namespace, Name: scaling.BuildJobName(t.Namespace, t.Name, t.Source.SHA256)}
	err = b.client.Get(ctx, key, job)
	if apierrors.IsNotFound(err) {
		desired, err := scaling.MakeBuildJob(t, b.opts)
		if err != nil {
			return buildResult{}, err
		}
		queued, err := b.queue.admit(ctx, key.Name, t)
		if err != nil {
			return buildResult{}, err
		}
		if queued != nil {
			return buildResult{state: buildQueued, image: image, message: queued.String()}, nil
		}
		// No build runs without its policy: applied (when changed) before each one starts.
		if err := b.ensurePolicy(ctx); err != nil {
			b.queue.created(key.Name, "")
			return buildResult{}, err
		}
		err = b.client.Create(ctx, desired)
		b.queue.created(key.Name, desired.UID) // "" when the create failed
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return buildResult{}, fmt.Errorf("creating build job %s: %w", key.Name, err)
		}
		return buildResult{state: buildRunning, image: image, job: desired}, nil
	}
	if err != nil {
		return buildResult{}, fmt.Errorf("getting build job %s: %w", key.Name, err)
	}
	switch {
	case jobCondition(job, batchv1.JobComplete):
		return b.succeeded(ctx, t, job, image)
	case jobCondition(job, batchv1.JobFailed):
		msg := b.failure(ctx, job)
		return buildResult{state: buildFailed, image: image, job: job, message: msg, unreachable: unreachableRegistry(msg, b.opts.Build)}, nil
	}
	return buildResult{state: buildRunning, image: image, job: job}, nil
}

// succeeded reads the image a completed build pushed, by digest, from its push step. A
// build whose pod is gone (deleted by hand; its Job's TTL would have taken the Job too) is
// run again: the same source gives the same image. A push step that reported no digest of
// the image's repository fails the build.
func (b builds) succeeded(ctx context.Context, t scaling.BuildTarget, job *batchv1.Job, dest string) (buildResult, error) {
	pod := newestPod(ctx, b.reader, job)
	if pod == nil {
		log.FromContext(ctx).Info("the completed build's pod is gone: building again", "job", job.Name)
		return buildResult{state: buildRunning, image: dest, job: job}, b.retry(ctx, t)
	}
	image, ok := scaling.BuildDigest(pod, dest)
	if !ok {
		return buildResult{state: buildFailed, image: dest, job: job,
			message: "the build's push step did not report " + dest + " by digest"}, nil
	}
	return buildResult{state: buildSucceeded, image: image, job: job}, nil
}

// failure explains a failed Job: the Job's reason plus the failed step's termination message
// (scaling.BuildFailure), for kaniko the tail of its log (FallbackToLogsOnError).
func (b builds) failure(ctx context.Context, job *batchv1.Job) string {
	reason := "build failed"
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			reason = strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	if pod := newestPod(ctx, b.reader, job); pod != nil {
		if msg := scaling.BuildFailure(pod); msg != "" {
			return reason + "\n" + msg
		}
	}
	return reason
}

// retry removes t's failed build Job, so the next ensure starts the build again.
func (b builds) retry(ctx context.Context, t scaling.BuildTarget) error {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: b.opts.Build.Namespace, Name: scaling.BuildJobName(t.Namespace, t.Name, t.Source.SHA256)}}
	if err := b.client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting failed build job %s for a retry: %w", job.Name, err)
	}
	return nil
}

// networkErrors are the phrases of a connection that never got an answer, as Go's and the
// registry clients' errors print them.
var networkErrors = []string{"connection refused", "no such host", "i/o timeout", "connection reset", "TLS handshake timeout",
	"network is unreachable", "no route to host", "503 Service Unavailable", "502 Bad Gateway", "server misbehaving"}

// unreachableRegistry names the registry a failed build's log shows unreachable — the push
// registry or a mirror, else Docker Hub — or returns "" for a failure of the build itself.
func unreachableRegistry(log string, opts scaling.BuildOptions) string {
	network := false
	for _, p := range networkErrors {
		network = network || strings.Contains(log, p)
	}
	if !network {
		return ""
	}
	host, _, _ := strings.Cut(opts.Registry, "/")
	for _, h := range append([]string{host}, append(opts.RegistryMirrors, "index.docker.io", "registry-1.docker.io")...) {
		if strings.Contains(log, h) {
			return h
		}
	}
	return ""
}

// deleteAll removes every build Job of t (the owner is going away).
func (b builds) deleteAll(ctx context.Context, t scaling.BuildTarget) error {
	err := b.client.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(b.opts.Build.Namespace),
		client.MatchingLabels(scaling.BuildLabels(t)), client.PropagationPolicy("Background"))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting build jobs of %s/%s: %w", t.Namespace, t.Name, err)
	}
	return nil
}

func jobCondition(job *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// terminationMessage returns the termination message of the first terminated container of
// the Job's newest pod (a run Job's one): the result of a run, or the log tail of a failed one.
func terminationMessage(ctx context.Context, r client.Reader, job *batchv1.Job) string {
	pod := newestPod(ctx, r, job)
	if pod == nil {
		return ""
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			return strings.TrimSpace(t.Message)
		}
	}
	return ""
}

func newestPod(ctx context.Context, r client.Reader, job *batchv1.Job) *corev1.Pod {
	var pods corev1.PodList
	// By UID: a retried build's Job has the same name as the one before it.
	if err := r.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.ControllerUidLabel: string(job.UID)}); err != nil {
		return nil
	}
	var newest *corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; newest == nil || newest.CreationTimestamp.Before(&p.CreationTimestamp) {
			newest = p
		}
	}
	return newest
}

// finalize removes what owner references cannot — uploaded artifacts and build Jobs in the
// platform namespace — then releases the object. label tells which kind obj is
// (scaling.LabelFunction or scaling.LabelJob). Children in the object's namespace go with
// their owner through garbage collection.
func finalize(ctx context.Context, c client.Client, artifacts ArtifactDeleter, b builds, obj client.Object, label string) error {
	if !controllerutil.ContainsFinalizer(obj, finalizer) {
		return nil
	}
	ns, name := obj.GetNamespace(), obj.GetName()
	if artifacts != nil {
		if err := artifacts.DeleteFunction(ctx, ns, name); err != nil {
			return fmt.Errorf("deleting artifacts of %s/%s: %w", ns, name, err)
		}
	}
	t := scaling.BuildTarget{Namespace: ns, Name: name, Label: label}
	if err := b.deleteAll(ctx, t); err != nil {
		return err
	}
	b.queue.forget(t)
	controllerutil.RemoveFinalizer(obj, finalizer)
	if err := c.Update(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer of %s/%s: %w", ns, name, err)
	}
	log.FromContext(ctx).Info("cleaned up", "namespace", ns, "name", name)
	return nil
}
