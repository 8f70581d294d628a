package scaling

import (
	"fmt"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/buildkit"
	"sless.dev/sless/rules"
)

// BuildTTLSeconds keeps a finished build Job long enough for the reconciler to read its
// outcome; the owner's status remembers the outcome afterwards.
const BuildTTLSeconds = 3600

// BuildTarget is what a build is for: a Function or a self-contained FunctionJob.
type BuildTarget struct {
	Namespace, Name string
	// Label is LabelFunction or LabelJob, telling which kind Name refers to.
	Label  string
	Source v1.SourceRef
}

// BuildLabels find the build Jobs of one target.
func BuildLabels(t BuildTarget) map[string]string {
	return map[string]string{LabelManagedBy: managedBy, LabelFunctionNamespace: t.Namespace, t.Label: t.Name}
}

// ImageFor is the image a build of t produces.
func ImageFor(t BuildTarget, opts BuildOptions) (string, error) {
	k, err := buildkit.NewKanikoSpec(opts.Bucket, t.Source.ContextKey, t.Source.SHA256, opts.Registry, t.Namespace, t.Name)
	return k.Destination, err
}

// MakeBuildJob renders the kaniko Job building t's source into ImageFor(t). It runs in the
// platform's build namespace (registry and S3 credentials never enter tenant namespaces), so
// it carries labels instead of an owner reference, and the owner's finalizer removes it.
func MakeBuildJob(t BuildTarget, opts BuildOptions) (*batchv1.Job, error) {
	k, err := buildkit.NewKanikoSpec(opts.Bucket, t.Source.ContextKey, t.Source.SHA256, opts.Registry, t.Namespace, t.Name)
	if err != nil {
		return nil, fmt.Errorf("build job: %w", err)
	}
	labels := BuildLabels(t)
	labels[LabelSource] = short(t.Source.SHA256)
	c := corev1.Container{
		Name:  "kaniko",
		Image: opts.KanikoImage,
		Args:  kanikoArgs(k, opts),
		Env: []corev1.EnvVar{
			{Name: "AWS_REGION", Value: opts.S3Region},
			{Name: "S3_ENDPOINT", Value: opts.S3Endpoint},
			{Name: "S3_FORCE_PATH_STYLE", Value: "true"},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(strconv.Itoa(int(opts.MemoryMB)) + "Mi")},
		},
		// The build log tail becomes the termination message, which the reconciler copies into
		// the owner's status: users see compiler errors without log access.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if opts.S3Secret != "" {
		c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: opts.S3Secret}}}}
	}
	pod := corev1.PodSpec{
		Containers:                   []corev1.Container{c},
		RestartPolicy:                corev1.RestartPolicyNever,
		AutomountServiceAccountToken: ptr.To(false),
		EnableServiceLinks:           ptr.To(false),
	}
	if opts.RegistrySecret != "" {
		pod.Volumes = []corev1.Volume{{Name: "registry", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: opts.RegistrySecret,
			Items:      []corev1.KeyToPath{{Key: corev1.DockerConfigJsonKey, Path: "config.json"}},
		}}}}
		pod.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "registry", MountPath: "/kaniko/.docker", ReadOnly: true}}
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:      BuildJobName(t.Namespace, t.Name, t.Source.SHA256),
			Namespace: opts.Namespace,
			Labels:    labels,
		},
		Spec: batchv1.JobSpec{
			// Builds are deterministic: a failed one fails again, so it is not retried.
			BackoffLimit:            ptr.To(int32(0)),
			ActiveDeadlineSeconds:   ptr.To(int64(opts.Deadline.Seconds())),
			TTLSecondsAfterFinished: ptr.To(int32(BuildTTLSeconds)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       pod,
			},
		},
	}, nil
}

// kanikoPushRetries rides out a registry that is briefly away (a restart, a rollout) within
// the build; longer outages fail the Job and the reconciler retries the build later.
const kanikoPushRetries = 3

// kanikoArgs are the executor's arguments for one build: the spec's, then the cluster's
// registry settings.
func kanikoArgs(k buildkit.KanikoSpec, opts BuildOptions) []string {
	args := append(k.Args(), "--cache=false", "--verbosity=warn",
		"--push-retry="+strconv.Itoa(kanikoPushRetries), "--image-download-retry="+strconv.Itoa(kanikoPushRetries))
	for _, r := range opts.InsecureRegistries {
		args = append(args, "--insecure-registry="+r)
	}
	for _, m := range opts.RegistryMirrors {
		args = append(args, "--registry-mirror="+m)
	}
	return args
}

// JobLabels select the run Jobs of a FunctionJob.
func JobLabels(fj *v1.FunctionJob) map[string]string {
	return map[string]string{LabelManagedBy: managedBy, LabelJob: fj.Name}
}

// MakeRunJob renders the Job running one FunctionJob run: the runtime's job mode reads the
// event, calls the handler once and writes the result to the termination message.
func MakeRunJob(fj *v1.FunctionJob, code *v1.CodeSpec, image string, opts Options) *batchv1.Job {
	event := "null"
	if fj.Spec.Event != nil && len(fj.Spec.Event.Raw) > 0 {
		event = string(fj.Spec.Event.Raw)
	}
	c := functionContainer(code, image,
		corev1.EnvVar{Name: "SLESS_MODE", Value: "job"},
		corev1.EnvVar{Name: "SLESS_EVENT", Value: event},
		corev1.EnvVar{Name: "SLESS_TERMINATION_LOG", Value: corev1.TerminationMessagePathDefault})
	pod := functionPodSpec(c, code, fj.Namespace, opts)
	pod.RestartPolicy = corev1.RestartPolicyNever
	labels := JobLabels(fj)
	spec := batchv1.JobSpec{
		BackoffLimit: ptr.To(int32(0)),
		Template:     corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
	}
	if d := rules.InvocationDeadline(code.TimeoutSeconds); d > 0 {
		spec.ActiveDeadlineSeconds = ptr.To(int64(d.Seconds()))
	}
	return &batchv1.Job{
		ObjectMeta: ownedMeta(fj, "FunctionJob", RunJobName(fj.Name, fj.Spec.RunID), labels),
		Spec:       spec,
	}
}
