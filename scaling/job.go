package scaling

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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

// ImageFor is the image a build of t pushes: a tag under the namespace's own repositories
// (<registry>/<namespace>/<name>:sha-<hash16>); the build reports it by digest.
func ImageFor(t BuildTarget, opts BuildOptions) (string, error) {
	k, err := buildkit.NewKanikoSpec(t.Source.ContextKey, t.Source.SHA256, opts.Registry, t.Namespace, t.Name)
	return k.Destination, err
}

// The steps of a build pod, in order. Only the fetch step holds the artifact store's
// credentials and only the push step the registry's: kaniko, which runs the tenant's install
// steps (pip, npm lifecycle scripts, go build), holds none, and neither the pod nor any
// container gets a service-account token. The steps share only the workspace volume, on
// which kaniko leaves the image as an OCI layout; the push step reads it after kaniko has
// exited, refusing anything but directories and regular files (buildkit.PushLayout).
const (
	BuildFetchContainer  = "fetch"
	BuildKanikoContainer = "kaniko"
	BuildPushContainer   = "push"
)

// Paths in the build pod's workspace (an emptyDir every step mounts).
const (
	buildWorkspace    = "/workspace"
	buildContextFile  = buildWorkspace + "/context.tar.gz"
	buildLayoutDir    = buildWorkspace + "/image"
	registryConfigDir = "/var/run/sless/registry"
)

// MakeBuildJob renders the Job building t's source into ImageFor(t): fetch the context,
// kaniko without credentials, push with the registry's (see BuildPushContainer). It runs in
// the platform's build namespace (registry and S3 credentials never enter tenant namespaces),
// so it carries labels instead of an owner reference, and the owner's finalizer removes it.
// The push step's termination message is the image by digest (BuildDigest reads it).
func MakeBuildJob(t BuildTarget, opts Options) (*batchv1.Job, error) {
	b := opts.Build
	k, err := buildkit.NewKanikoSpec(t.Source.ContextKey, t.Source.SHA256, b.Registry, t.Namespace, t.Name)
	if err != nil {
		return nil, fmt.Errorf("build job: %w", err)
	}
	labels := BuildLabels(t)
	labels[LabelSource] = short(t.Source.SHA256)
	workspace := corev1.VolumeMount{Name: "workspace", MountPath: buildWorkspace}
	fetch := platformStep(BuildFetchContainer, opts.SlessImage, workspace, "build-step", "fetch",
		"--s3-endpoint="+b.S3Endpoint, "--s3-bucket="+b.Bucket, "--s3-region="+b.S3Region,
		"--key="+k.ContextKey, "--out="+buildContextFile)
	if b.S3Secret != "" {
		for _, key := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
			fetch.Env = append(fetch.Env, corev1.EnvVar{Name: key, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: b.S3Secret}, Key: key}}})
		}
	}
	kaniko := corev1.Container{
		Name:  BuildKanikoContainer,
		Image: b.KanikoImage,
		Args:  kanikoArgs(k, b),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(strconv.Itoa(int(b.MemoryMB)) + "Mi")},
		},
		VolumeMounts: []corev1.VolumeMount{workspace},
		// The build log tail becomes the termination message, which the reconciler copies into
		// the owner's status: users see compiler errors without log access.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	pushArgs := []string{"build-step", "push", "--layout=" + buildLayoutDir, "--destination=" + k.Destination}
	for _, r := range b.InsecureRegistries {
		pushArgs = append(pushArgs, "--insecure-registry="+r)
	}
	workspace.ReadOnly = true
	push := platformStep(BuildPushContainer, opts.SlessImage, workspace, pushArgs...)
	// kaniko, as root, writes the layout's blobs 0600 (os.CreateTemp): the push step reads
	// them as their owner, root without a single capability (no CAP_DAC_OVERRIDE), so it
	// reads what root owns and nothing of another user's.
	push.SecurityContext.RunAsNonRoot, push.SecurityContext.RunAsUser = ptr.To(false), ptr.To(int64(0))
	pod := corev1.PodSpec{
		InitContainers:               []corev1.Container{fetch, kaniko},
		Containers:                   []corev1.Container{push},
		RestartPolicy:                corev1.RestartPolicyNever,
		AutomountServiceAccountToken: ptr.To(false),
		EnableServiceLinks:           ptr.To(false),
		Volumes:                      []corev1.Volume{{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
	}
	if b.RegistrySecret != "" {
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "registry", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: b.RegistrySecret,
			Items:      []corev1.KeyToPath{{Key: corev1.DockerConfigJsonKey, Path: "config.json"}},
		}}})
		c := &pod.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "registry", MountPath: registryConfigDir, ReadOnly: true})
		c.Env = append(c.Env, corev1.EnvVar{Name: "DOCKER_CONFIG", Value: registryConfigDir})
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:      BuildJobName(t.Namespace, t.Name, t.Source.SHA256),
			Namespace: b.Namespace,
			Labels:    labels,
		},
		Spec: batchv1.JobSpec{
			// Builds are deterministic: a failed one fails again, so it is not retried.
			BackoffLimit:            ptr.To(int32(0)),
			ActiveDeadlineSeconds:   ptr.To(int64(b.Deadline.Seconds())),
			TTLSecondsAfterFinished: ptr.To(int32(BuildTTLSeconds)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       pod,
			},
		},
	}, nil
}

// platformStep is a build step the platform's own binary runs (`sless build-step ...`) as a
// non-root user without capabilities on a read-only root, its error as its termination
// message.
func platformStep(name, image string, workspace corev1.VolumeMount, args ...string) corev1.Container {
	return corev1.Container{
		Name:  name,
		Image: image,
		Args:  args,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("50m")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
		VolumeMounts:             []corev1.VolumeMount{workspace},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To(int64(65532)),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

// kanikoImageRetries rides out a registry that is briefly away (a restart, a rollout) while
// base images are pulled; longer outages fail the Job and the reconciler retries the build
// later. The push step retries its own pushes (go-containerregistry's backoff).
const kanikoImageRetries = 3

// kanikoArgs are the executor's arguments for one build: the context the fetch step wrote,
// the image left as an OCI layout for the push step (no push, so no credential), then the
// cluster's registry settings for base images.
func kanikoArgs(k buildkit.KanikoSpec, opts BuildOptions) []string {
	args := []string{"--context=tar://" + buildContextFile, "--dockerfile=" + k.Dockerfile,
		"--no-push", "--oci-layout-path=" + buildLayoutDir, "--reproducible",
		"--cache=false", "--verbosity=warn", "--image-download-retry=" + strconv.Itoa(kanikoImageRetries)}
	for _, r := range opts.InsecureRegistries {
		args = append(args, "--insecure-registry="+r)
	}
	for _, m := range opts.RegistryMirrors {
		args = append(args, "--registry-mirror="+m)
	}
	return args
}

// BuildDigest reads the image a finished build pushed from its pod: the push step's
// termination message, which must name dest's repository by digest. ok is false when the pod
// has no such message.
func BuildDigest(pod *corev1.Pod, dest string) (image string, ok bool) {
	want, err := name.NewTag(dest, name.WeakValidation)
	if err != nil {
		return "", false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		t := cs.State.Terminated
		if cs.Name != BuildPushContainer || t == nil || t.ExitCode != 0 {
			continue
		}
		d, err := name.NewDigest(strings.TrimSpace(t.Message), name.WeakValidation)
		if err != nil || d.Context().String() != want.Context().String() {
			return "", false
		}
		return d.String(), true
	}
	return "", false
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

// BuildNetworkPolicyName names the NetworkPolicy of every build pod in the build namespace.
const BuildNetworkPolicyName = "sless-builds"

// BuildEgress is a range of addresses build pods may reach (package registries, Docker Hub,
// a registry or artifact store outside the cluster), on Ports (all ports when none). The
// operator's --build-egress, CIDR[:PORT[/PROTOCOL][,...]]; ParseBuildEgress reads it.
type BuildEgress struct {
	Prefix netip.Prefix
	Ports  []networkingv1.NetworkPolicyPort
}

// DefaultBuildEgress is every public address: a range here never reaches the
// rules.NonPublicPrefixes inside it, nor the API server (BuildReach.Never).
var DefaultBuildEgress = []BuildEgress{{Prefix: netip.MustParsePrefix("0.0.0.0/0")}, {Prefix: netip.MustParsePrefix("::/0")}}

// ParseBuildEgress reads CIDR[:PORT[/PROTOCOL][,PORT...]], e.g. 0.0.0.0/0:443,80,
// 10.20.0.5/32:5000 or 169.254.20.10/32:53/udp,53/tcp; the protocol is TCP unless given.
func ParseBuildEgress(s string) (BuildEgress, error) {
	slash := strings.IndexByte(s, '/')
	if slash < 0 {
		return BuildEgress{}, fmt.Errorf("build egress %q: want CIDR[:PORT,...], e.g. 203.0.113.0/24:443 or 10.20.0.5/32:5000", s)
	}
	cidr, ports, hasPorts := strings.Cut(s[slash:], ":")
	cidr = s[:slash] + cidr
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return BuildEgress{}, fmt.Errorf("build egress %q: %w", s, err)
	}
	if p != p.Masked() {
		return BuildEgress{}, fmt.Errorf("build egress %q: %s has host bits set; did you mean %s?", s, p, p.Masked())
	}
	e := BuildEgress{Prefix: p}
	if !hasPorts {
		return e, nil
	}
	for _, port := range strings.Split(ports, ",") {
		num, proto, _ := strings.Cut(port, "/")
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || n > 65535 {
			return BuildEgress{}, fmt.Errorf("build egress %q: port %q is not a number from 1 to 65535", s, num)
		}
		protocol := corev1.ProtocolTCP
		switch strings.ToLower(proto) {
		case "", "tcp":
		case "udp":
			protocol = corev1.ProtocolUDP
		case "sctp":
			protocol = corev1.ProtocolSCTP
		default:
			return BuildEgress{}, fmt.Errorf("build egress %q: protocol %q: want tcp, udp or sctp", s, proto)
		}
		e.Ports = append(e.Ports, networkingv1.NetworkPolicyPort{Protocol: ptr.To(protocol), Port: ptr.To(intstr.FromInt32(int32(n)))})
	}
	return e, nil
}

// String is e as ParseBuildEgress reads it.
func (e BuildEgress) String() string {
	var ports []string
	for _, p := range e.Ports {
		port := p.Port.String()
		if proto := ptr.Deref(p.Protocol, corev1.ProtocolTCP); proto != corev1.ProtocolTCP {
			port += "/" + strings.ToLower(string(proto))
		}
		ports = append(ports, port)
	}
	if len(ports) == 0 {
		return e.Prefix.String()
	}
	return e.Prefix.String() + ":" + strings.Join(ports, ",")
}

// BuildReach is what the operator looked up for the build pods' NetworkPolicy, which a pure
// renderer cannot: where the registry, its mirrors and the artifact store are, and which
// addresses no egress range may reach.
type BuildReach struct {
	// Endpoints are the registry, its mirrors and the artifact store, as the pods of an
	// in-cluster Service or as addresses.
	Endpoints []BuildEndpoint
	// Never are addresses left out of every BuildOptions.Egress range: the API server's.
	Never []netip.Prefix
}

// BuildEndpoint is one place build steps connect to: the pods Selector picks in Namespace,
// or else Prefixes, on Ports (TCP).
type BuildEndpoint struct {
	Namespace string
	Selector  map[string]string
	Prefixes  []netip.Prefix
	Ports     []intstr.IntOrString
}

// MakeBuildNetworkPolicy renders the policy of every build pod in opts.Namespace: no ingress;
// egress to the cluster's DNS (port 53 in kube-system), to reach's endpoints (the registry
// the push step pushes to and kaniko pulls base images from, the artifact store the fetch
// step reads) and to opts.Egress, whose ranges never include rules.NonPublicPrefixes or
// reach.Never unless a range lies wholly inside one (an operator naming an internal address
// means it). A NetworkPolicy holds for a pod, not a container: kaniko, which runs the
// tenant's install steps, reaches whatever the fetch and push steps reach, without their
// credentials — the registry and the artifact store must require them.
func MakeBuildNetworkPolicy(opts BuildOptions, reach BuildReach) *networkingv1.NetworkPolicy {
	tcp, udp := ptr.To(corev1.ProtocolTCP), ptr.To(corev1.ProtocolUDP)
	dns := intstr.FromInt32(53)
	egress := []networkingv1.NetworkPolicyEgressRule{{
		To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{corev1.LabelMetadataName: metav1.NamespaceSystem}}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: udp, Port: &dns}, {Protocol: tcp, Port: &dns}},
	}}
	for _, e := range reach.Endpoints {
		rule := networkingv1.NetworkPolicyEgressRule{}
		for _, p := range e.Ports {
			rule.Ports = append(rule.Ports, networkingv1.NetworkPolicyPort{Protocol: tcp, Port: ptr.To(p)})
		}
		if e.Selector != nil {
			rule.To = []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: e.Namespace}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: e.Selector},
			}}
		}
		for _, p := range e.Prefixes {
			rule.To = append(rule.To, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: p.String()}})
		}
		if len(rule.To) > 0 {
			egress = append(egress, rule)
		}
	}
	never := append(rules.NonPublicPrefixes(), reach.Never...)
	for _, e := range opts.Egress {
		block := &networkingv1.IPBlock{CIDR: e.Prefix.String()}
		for _, n := range never {
			// An exception must lie strictly inside its block (the API server refuses others).
			if n.Addr().Is4() == e.Prefix.Addr().Is4() && n.Bits() > e.Prefix.Bits() && e.Prefix.Contains(n.Addr()) {
				block.Except = append(block.Except, n.String())
			}
		}
		egress = append(egress, networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: block}}, Ports: e.Ports})
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: BuildNetworkPolicyName, Namespace: opts.Namespace, Labels: map[string]string{LabelManagedBy: managedBy}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: BuildPodSelector(),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Egress:      egress,
		},
	}
}

// BuildPodSelector selects every build pod (MakeBuildJob labels them with their source).
func BuildPodSelector() metav1.LabelSelector {
	return metav1.LabelSelector{
		MatchLabels:      map[string]string{LabelManagedBy: managedBy},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: LabelSource, Operator: metav1.LabelSelectorOpExists}},
	}
}

// BuildFailure explains a failed build from its pod: the message of the first step that
// failed, named unless it is kaniko's (whose log tail is the compiler's or installer's own
// words). "" when no step reports a failure (a deadline that stopped a running step).
func BuildFailure(pod *corev1.Pod) string {
	lead := map[string]string{
		BuildFetchContainer: "fetching the build context failed: ",
		BuildPushContainer:  "pushing the image failed: ",
	}
	for _, cs := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			msg := strings.TrimSpace(t.Message)
			if msg == "" {
				msg = fmt.Sprintf("exit code %d", t.ExitCode)
			}
			return lead[cs.Name] + msg
		}
	}
	return ""
}
