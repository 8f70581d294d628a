package scaling

import (
	"sort"
	"strconv"
	"time"

	httpv1alpha1 "github.com/kedacore/http-add-on/operator/apis/http/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/buildkit"
	"sless.dev/sless/imagepolicy"
	"sless.dev/sless/rules"
)

// FunctionContainer names the container of a function's pods (and of its job runs).
const FunctionContainer = "function"

// Function pods listen on this port; the wrapper reads it from $PORT (runtimes/README.md).
const (
	portName = "http"
	port     = buildkit.DefaultPort
	// noLimit stands in for "no timeout" where the add-on needs a duration (0 means its
	// global default of 300 s there, not unlimited).
	noLimit = 24 * time.Hour
)

// FunctionLabels select a function's pods and children.
func FunctionLabels(fn *v1.Function) map[string]string {
	return map[string]string{LabelManagedBy: managedBy, LabelFunction: fn.Name}
}

// ownedMeta names a child of owner (an object of kind) in owner's namespace, controlled by it.
func ownedMeta(owner metav1.Object, kind, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       owner.GetNamespace(),
		Labels:          labels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, v1.GroupVersion.WithKind(kind))},
	}
}

func functionMeta(fn *v1.Function, name string) metav1.ObjectMeta {
	return ownedMeta(fn, "Function", name, FunctionLabels(fn))
}

// RevisionLabels select a revision's pods and children.
func RevisionLabels(rev *v1.Revision) map[string]string {
	return map[string]string{LabelManagedBy: managedBy, LabelFunction: rev.Spec.Function, LabelRevision: rev.Name}
}

// revisionMeta names a child of rev: the revision's name, controlled by it, so deleting a
// revision deletes what runs it.
func revisionMeta(rev *v1.Revision) metav1.ObjectMeta {
	return ownedMeta(rev, "Revision", rev.Name, RevisionLabels(rev))
}

// sortedEnv renders env in key order so equal specs give byte-equal pod templates (no
// spurious rollouts), followed by the platform's own variables.
func sortedEnv(user map[string]string, platform ...corev1.EnvVar) []corev1.EnvVar {
	keys := make([]string, 0, len(user))
	for k := range user {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]corev1.EnvVar, 0, len(keys)+len(platform))
	for _, k := range keys {
		env = append(env, corev1.EnvVar{Name: k, Value: user[k]})
	}
	return append(env, platform...)
}

// secretFilesGroup owns a function's secret files (the pod's fsGroup, a supplementary
// group of its process whatever user the image runs as), which only it may read.
const secretFilesGroup = 65532

// secretEnv renders secret_env as references the kubelet resolves: no value in the pod spec.
func secretEnv(refs []v1.SecretEnvVar) []corev1.EnvVar {
	env := make([]corev1.EnvVar, 0, len(refs))
	for _, r := range refs {
		env = append(env, corev1.EnvVar{Name: r.Name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: r.Secret}, Key: r.Key}}})
	}
	return env
}

// secretVolumes renders secret_files as read-only Secret volumes, one file per key readable
// by the pod's fsGroup only.
func secretVolumes(refs []v1.SecretFilesMount) ([]corev1.Volume, []corev1.VolumeMount) {
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for i, r := range refs {
		name := "secret-" + strconv.Itoa(i)
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: r.Secret, DefaultMode: ptr.To(int32(0o440))}}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: rules.SecretFilePath(r.Secret, r.Path), ReadOnly: true})
	}
	return vols, mounts
}

// functionContainer is the container running user code, shared by Deployments and job runs.
func functionContainer(code *v1.CodeSpec, image string, platformEnv ...corev1.EnvVar) corev1.Container {
	env := []corev1.EnvVar{
		{Name: "PORT", Value: strconv.Itoa(port)},
		{Name: "SLESS_HOST", Value: "0.0.0.0"},
		{Name: "SLESS_TIMEOUT_SECONDS", Value: strconv.Itoa(int(code.TimeoutSeconds))},
	}
	if code.Entrypoint != "" {
		env = append(env, corev1.EnvVar{Name: "SLESS_HANDLER", Value: code.Entrypoint})
	}
	mem := resource.MustParse(strconv.Itoa(int(memoryMB(code))) + "Mi")
	return corev1.Container{
		Name:  FunctionContainer,
		Image: image,
		Env:   sortedEnv(code.Env, append(append(secretEnv(code.SecretEnv), env...), platformEnv...)...),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: mem, corev1.ResourceCPU: resource.MustParse("50m")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: mem},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

func memoryMB(code *v1.CodeSpec) int32 {
	if code.MemoryMB > 0 {
		return code.MemoryMB
	}
	return rules.DefaultMemoryMB
}

// functionPodSpec is the pod spec shared by a function's Deployment and its job runs in
// namespace: functions get no API credentials and no service-link variables, and the
// platform's pull secret only for the namespace's own images in the platform registry —
// never another tenant's, nor an image elsewhere that the secret might also read.
func functionPodSpec(c corev1.Container, code *v1.CodeSpec, namespace string, opts Options) corev1.PodSpec {
	vols, mounts := secretVolumes(code.SecretFiles)
	c.VolumeMounts = mounts
	spec := corev1.PodSpec{
		Containers:                    []corev1.Container{c},
		Volumes:                       vols,
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(int64(30)),
	}
	if len(vols) > 0 {
		spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To(int64(secretFilesGroup))}
	}
	if opts.ImagePullSecret != "" && imagepolicy.OwnImage(opts.Build.Registry, namespace, c.Image) {
		spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: opts.ImagePullSecret}}
	}
	return spec
}

// preStopSeconds is how long a function pod being deleted goes on serving before SIGTERM.
const preStopSeconds = 2

// MakeDeployment renders the Deployment running revision rev of fn: the revision's image
// and code settings, the function's scaling. Replicas start at the minimum; KEDA owns them
// afterwards (the reconciler keeps the live value when updating). secretVersions are the
// versions of the secrets rev references: their checksum on the pod template rolls the pods
// when one is rotated.
func MakeDeployment(fn *v1.Function, rev *v1.Revision, secretVersions map[string]int64, opts Options) *appsv1.Deployment {
	code := &rev.Spec.CodeSpec
	c := functionContainer(code, rev.Status.Image,
		corev1.EnvVar{Name: "SLESS_FUNCTION", Value: fn.Name},
		corev1.EnvVar{Name: "SLESS_NAMESPACE", Value: fn.Namespace},
		corev1.EnvVar{Name: "SLESS_REVISION", Value: rev.Name},
		identityKeyEnv(fn.Name))
	c.Ports = []corev1.ContainerPort{{Name: portName, ContainerPort: port, Protocol: corev1.ProtocolTCP}}
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: readiness(code.Protocol), PeriodSeconds: 1, FailureThreshold: 3}
	// A pod being deleted keeps serving for a moment: the interceptor routes by EndpointSlice,
	// and until the slice says the pod is terminating a new request may still be sent to it
	// (a closed port: a 502). SIGTERM (graceful drain) comes after the sleep.
	c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: preStopSeconds}}}
	pod := functionPodSpec(c, code, fn.Namespace, opts)
	// In-flight requests may run until their deadline; give them that long to finish when
	// it is beyond Kubernetes' default grace period (30 s).
	if d := rules.InvocationDeadline(code.TimeoutSeconds); d > 30*time.Second {
		pod.TerminationGracePeriodSeconds = ptr.To(int64(d.Seconds()))
	}
	labels := RevisionLabels(rev)
	return &appsv1.Deployment{
		ObjectMeta: revisionMeta(rev),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(fn.Spec.Scale.MinReplicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: podAnnotations(secretVersions, opts)},
				Spec:       pod,
			},
		},
	}
}

// podAnnotations roll a function's pods when what they read at start changes: the
// checksum of the versions of the secrets they reference, the fingerprint of the master key
// theirs is derived from.
func podAnnotations(versions map[string]int64, opts Options) map[string]string {
	a := map[string]string{AnnotationIdentity: rules.KeyFingerprint(opts.IdentityMaster)}
	if sum := rules.SecretsChecksum(versions); sum != "" {
		a[rules.SecretsChecksumAnnotation] = sum
	}
	return a
}

// readiness probes the wrappers' health path; a server speaking h2c (an image of the user's)
// need not answer HTTP/1.1 at all, so it is ready once its port takes connections.
func readiness(p v1.Protocol) corev1.ProbeHandler {
	if p == rules.ProtocolH2C {
		return corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(portName)}}
	}
	return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: buildkit.HealthPath, Port: intstr.FromString(portName)}}
}

// appProtocolH2C on a Service port makes the KEDA HTTP interceptor speak h2c to its pods.
const appProtocolH2C = "kubernetes.io/h2c"

// MakeService renders the ClusterIP Service the interceptor forwards a revision's calls to.
func MakeService(rev *v1.Revision) *corev1.Service {
	sp := corev1.ServicePort{Name: portName, Port: port, TargetPort: intstr.FromString(portName), Protocol: corev1.ProtocolTCP}
	if rev.Spec.Protocol == rules.ProtocolH2C {
		sp.AppProtocol = ptr.To(appProtocolH2C)
	}
	return &corev1.Service{
		ObjectMeta: revisionMeta(rev),
		Spec:       corev1.ServiceSpec{Selector: RevisionLabels(rev), Ports: []corev1.ServicePort{sp}},
	}
}

// MakeHTTPScaledObject renders the add-on object that routes revision rev's host
// (rules.RevisionHost) to its Service and scales its Deployment from zero, by fn's scaling:
// each revision scales on its own. paused freezes it at zero replicas in place.
func MakeHTTPScaledObject(fn *v1.Function, rev *v1.Revision, paused bool, opts Options) *httpv1alpha1.HTTPScaledObject {
	s := fn.Spec.Scale
	metric := &httpv1alpha1.ScalingMetricSpec{}
	if s.Metric == v1.ScaleOnRequestRate {
		metric.Rate = &httpv1alpha1.RateMetricSpec{
			TargetValue: int(s.Target),
			Window:      metav1.Duration{Duration: time.Minute},
			Granularity: metav1.Duration{Duration: time.Second},
		}
	} else {
		metric.Concurrency = &httpv1alpha1.ConcurrencyMetricSpec{TargetValue: int(s.Target)}
	}
	responseHeader := noLimit
	if d := rules.InvocationDeadline(rev.Spec.TimeoutSeconds); d > 0 {
		responseHeader = d
	}
	hso := &httpv1alpha1.HTTPScaledObject{
		ObjectMeta: revisionMeta(rev),
		Spec: httpv1alpha1.HTTPScaledObjectSpec{
			Hosts: []string{rules.RevisionHost(rev.Namespace, rev.Name, opts.Domain)},
			ScaleTargetRef: httpv1alpha1.ScaleTargetRef{
				Name: rev.Name, Kind: "Deployment", APIVersion: "apps/v1", Service: rev.Name, Port: port,
			},
			Replicas:       &httpv1alpha1.ReplicaStruct{Min: ptr.To(s.MinReplicas), Max: ptr.To(s.MaxReplicas)},
			CooldownPeriod: ptr.To(s.ScaleDownPeriodSeconds),
			ScalingMetric:  metric,
			Timeouts: &httpv1alpha1.HTTPScaledObjectTimeoutsSpec{
				ConditionWait:  metav1.Duration{Duration: opts.ColdStartTimeout},
				ResponseHeader: metav1.Duration{Duration: responseHeader},
			},
		},
	}
	if paused {
		hso.Annotations = map[string]string{AnnotationPausedReplicas: "0"}
	}
	return hso
}
