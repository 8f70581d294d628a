package cluster

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
	"sless.dev/sless/triggers"
)

// The functions below map CRD objects to the wire model and back. The apply* functions write
// only the fields the API knows into an existing spec, so fields set by other means (kubectl,
// defaults the API does not expose) survive an update.

func functionOf(fn *v1alpha1.Function) api.Function {
	s, code := fn.Spec, scaling.RevisionConfigOf(&fn.Spec.CodeSpec)
	out := api.Function{
		Name: fn.Name, Namespace: fn.Namespace, CreatedAt: fn.CreationTimestamp.UTC(),
		FunctionSpec: api.FunctionSpec{
			Runtime: code.Runtime, Entrypoint: code.Entrypoint, EnvVars: code.EnvVars, MemoryMB: code.MemoryMB,
			TimeoutSec: code.TimeoutSec, MinReplicas: s.Scale.MinReplicas, MaxReplicas: s.Scale.MaxReplicas,
			ScaleDownPeriodSec: s.Scale.ScaleDownPeriodSeconds, ScalingMetric: string(s.Scale.Metric),
			ScalingTarget: s.Scale.Target, StreamIdleTimeoutSec: s.StreamIdleTimeoutSeconds,
			Image: code.Image, Protocol: code.Protocol, Source: code.Source,
			Async: api.AsyncPolicy{Enabled: s.Async.Enabled, MaxAttempts: s.Async.Retry.MaxAttempts,
				BackoffMs: s.Async.Retry.BackoffMillis, DeadLetterQueue: s.Async.DeadLetterQueue, MaxJobs: s.Async.MaxJobs},
			SecretEnv: code.SecretEnv, SecretFiles: code.SecretFiles,
			Traffic: s.TrafficRules(), RevisionHistoryLimit: s.RevisionHistoryLimit, Rollout: s.Rollout.Policy(),
		},
		Status: api.FunctionStatus{
			Phase: string(fn.Status.Phase), URL: fn.Status.URL, Image: fn.Status.Image,
			LastBuildTime: timeOf(fn.Status.LastBuildTime), LastBuildError: fn.Status.LastBuildError,
			LatestCreatedRevision: fn.Status.LatestCreatedRevision, LatestReadyRevision: fn.Status.LatestReadyRevision,
			Traffic: v1alpha1.ResolvedRules(fn.Status.Traffic), Rollout: fn.Status.Rollout.State(),
		},
	}
	out.FunctionSpec.Default()
	out.Status.Ready, out.Status.Message = rules.FunctionView(string(fn.Status.Phase), readyMessage(fn.Status.Conditions), fn.Generation, fn.Status.ObservedGeneration)
	return out
}

// applyFunctionSpec writes the API's function spec into the CRD's. The default traffic is
// stored as none (the CRD's default), so a function never given traffic follows latest
// whatever the default becomes.
func applyFunctionSpec(dst *v1alpha1.FunctionSpec, s api.FunctionSpec) error {
	dst.Traffic = nil
	if len(s.Traffic) > 0 && !slices.Equal(s.Traffic, rules.DefaultTraffic()) {
		for _, t := range s.Traffic {
			dst.Traffic = append(dst.Traffic, v1alpha1.TrafficTarget(t))
		}
	}
	dst.RevisionHistoryLimit = s.RevisionHistoryLimit
	dst.Rollout = v1alpha1.RolloutSpecOf(s.Rollout)
	applyCode(&dst.CodeSpec, s.Runtime, s.Entrypoint, s.EnvVars, s.MemoryMB, s.TimeoutSec, s.Image)
	dst.Source = sourceRef(s.Source)
	dst.Scale.MinReplicas, dst.Scale.MaxReplicas = s.MinReplicas, s.MaxReplicas
	dst.Scale.ScaleDownPeriodSeconds = s.ScaleDownPeriodSec
	dst.StreamIdleTimeoutSeconds = s.StreamIdleTimeoutSec
	dst.Protocol = v1alpha1.Protocol(rules.StoredProtocol(s.Protocol))
	dst.Scale.Metric, dst.Scale.Target = v1alpha1.ScalingMetric(s.ScalingMetric), s.ScalingTarget
	dst.Async.Enabled, dst.Async.DeadLetterQueue = s.Async.Enabled, s.Async.DeadLetterQueue
	dst.Async.Retry.MaxAttempts, dst.Async.Retry.BackoffMillis = s.Async.MaxAttempts, s.Async.BackoffMs
	dst.Async.MaxJobs = s.Async.MaxJobs
	dst.SecretEnv, dst.SecretFiles = nil, nil
	for _, e := range s.SecretEnv {
		dst.SecretEnv = append(dst.SecretEnv, v1alpha1.SecretEnvVar{Name: e.Name, Secret: e.Secret, Key: e.Key})
	}
	for _, f := range s.SecretFiles {
		dst.SecretFiles = append(dst.SecretFiles, v1alpha1.SecretFilesMount{Secret: f.Secret, Path: f.Path})
	}
	return nil
}

// revisionOf is the API's view of a revision, with its share of the function's traffic.
func revisionOf(rev *v1alpha1.Revision, traffic []api.ResolvedTarget) api.Revision {
	out := api.Revision{
		Name: rev.Name, Namespace: rev.Namespace, Function: rev.Spec.Function, Number: rev.Spec.Number,
		CreatedAt: rev.CreationTimestamp.UTC(), Config: scaling.RevisionConfigOf(&rev.Spec.CodeSpec),
		Status: api.RevisionStatus{Phase: cmp.Or(string(rev.Status.Phase), api.RevisionBuilding), Message: rev.Status.Message, Image: rev.Status.Image},
	}
	out.Percent, out.Tags = rules.Shares(traffic, rev.Name)
	if out.Tags == nil {
		out.Tags = []string{}
	}
	return out
}

func applyCode(dst *v1alpha1.CodeSpec, runtime, entrypoint string, env map[string]string, memoryMB, timeoutSec int32, image string) {
	dst.Runtime, dst.Entrypoint, dst.Env = v1alpha1.Runtime(runtime), entrypoint, maps.Clone(env)
	dst.MemoryMB, dst.TimeoutSeconds, dst.Image = memoryMB, timeoutSec, image
}

func sourceRef(s *api.Source) *v1alpha1.SourceRef {
	if s == nil {
		return nil
	}
	return &v1alpha1.SourceRef{ContextKey: s.ContextKey, ArchiveKey: s.ArchiveKey, SHA256: s.SHA256}
}

func triggerOf(t *v1alpha1.Trigger) api.Trigger {
	return api.Trigger{
		Name: t.Name, Namespace: t.Namespace, CreatedAt: t.CreationTimestamp.UTC(),
		TriggerSpec: triggers.FromCRD(t.Spec),
		Status: api.TriggerStatus{Active: t.Status.Active, URL: t.Status.URL, LastFireTime: timeOf(t.Status.LastFireTime),
			Message: readyMessage(t.Status.Conditions)},
	}
}

func jobOf(j *v1alpha1.FunctionJob) api.Job {
	s, st, code := j.Spec, j.Status, scaling.RevisionConfigOf(&j.Spec.CodeSpec)
	out := api.Job{
		Name: j.Name, Namespace: j.Namespace, CreatedAt: j.CreationTimestamp.UTC(),
		JobSpec: api.JobSpec{
			Runtime: code.Runtime, Entrypoint: code.Entrypoint, EnvVars: code.EnvVars, MemoryMB: code.MemoryMB,
			TimeoutSec: code.TimeoutSec, Image: code.Image, Source: code.Source, RunID: s.RunID,
		},
		Status: api.JobStatus{
			Phase: string(st.Phase), ObservedRunID: st.ObservedRunID, StartTime: timeOf(st.StartTime),
			CompletionTime: timeOf(st.CompletionTime), DurationMs: st.DurationMillis, Result: st.Result,
			Output: st.Output, Error: st.Error,
		},
	}
	if s.FunctionRef != nil {
		out.Function = s.FunctionRef.Name
	}
	if s.Event != nil {
		out.Event = json.RawMessage(s.Event.Raw)
	}
	return out
}

func applyJobSpec(dst *v1alpha1.FunctionJobSpec, s api.JobSpec) {
	applyCode(&dst.CodeSpec, s.Runtime, s.Entrypoint, s.EnvVars, s.MemoryMB, s.TimeoutSec, s.Image)
	dst.Source = sourceRef(s.Source)
	dst.FunctionRef = nil
	if s.Function != "" {
		dst.FunctionRef = &v1alpha1.LocalObjectReference{Name: s.Function}
	}
	dst.Event = nil
	if len(s.Event) > 0 {
		dst.Event = &apiextensionsv1.JSON{Raw: append([]byte(nil), s.Event...)}
	}
	dst.RunID = s.RunID
}

func timeOf(t *metav1.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// readyMessage is the Ready (or Succeeded) condition's message when it is not true.
func readyMessage(conds []metav1.Condition) string {
	for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionSucceeded} {
		if c := meta.FindStatusCondition(conds, typ); c != nil && c.Status != metav1.ConditionTrue {
			return c.Message
		}
	}
	return ""
}

// secretOf is a Secret's API view: keys and version, never values.
func secretOf(s *corev1.Secret) api.Secret {
	version, _ := strconv.ParseInt(s.Annotations[rules.SecretVersionAnnotation], 10, 64)
	updated, err := time.Parse(time.RFC3339, s.Annotations[rules.SecretUpdatedAnnotation])
	if err != nil {
		updated = s.CreationTimestamp.Time
	}
	return api.Secret{Name: s.Name, Namespace: s.Namespace, CreatedAt: s.CreationTimestamp.UTC(), UpdatedAt: updated.UTC(),
		Version: version, Keys: slices.Sorted(maps.Keys(s.Data))}
}

// applySecretData replaces a Secret's data with spec's, a new version: labelled as the API's
// (and sless's, so the operator's cache sees it), its version counted up.
func applySecretData(s *corev1.Secret, spec api.SecretSpec) {
	version, _ := strconv.ParseInt(s.Annotations[rules.SecretVersionAnnotation], 10, 64)
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Labels[rules.SecretLabel] = "true"
	s.Labels["app.kubernetes.io/managed-by"] = "sless"
	s.Annotations[rules.SecretVersionAnnotation] = strconv.FormatInt(version+1, 10)
	s.Annotations[rules.SecretUpdatedAnnotation] = time.Now().UTC().Format(time.RFC3339)
	s.Type = corev1.SecretTypeOpaque
	s.Data, s.StringData = spec.Data, nil
}
