package scaling

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
)

func buildTarget(ns, fn string) BuildTarget {
	return BuildTarget{Namespace: ns, Name: fn, Label: LabelFunction,
		Source: v1.SourceRef{ContextKey: "contexts/" + ns + "/" + fn + "/1.tar.gz", SHA256: sha}}
}

// containers are a build pod's steps by name, init containers included.
func containers(pod corev1.PodSpec) map[string]corev1.Container {
	out := map[string]corev1.Container{}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		out[c.Name] = c
	}
	return out
}

func TestMakeBuildJob(t *testing.T) {
	target := buildTarget("sless-abc", "hello")
	opts := testOptions()
	j, err := MakeBuildJob(target, opts)
	if err != nil {
		t.Fatal(err)
	}
	if j.Namespace != "sless-system" || j.Name != BuildJobName("sless-abc", "hello", sha) {
		t.Errorf("job %s/%s", j.Namespace, j.Name)
	}
	if *j.Spec.BackoffLimit != 0 || *j.Spec.ActiveDeadlineSeconds != 900 || *j.Spec.TTLSecondsAfterFinished != BuildTTLSeconds {
		t.Error("a build must not retry, must have a deadline and must be kept for its outcome")
	}
	if j.Labels[LabelFunction] != "hello" || j.Labels[LabelFunctionNamespace] != "sless-abc" || j.Spec.Template.Labels[LabelSource] != sha[:16] {
		t.Errorf("labels = %v / %v", j.Labels, j.Spec.Template.Labels)
	}
	pod := j.Spec.Template.Spec
	var order []string
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		order = append(order, c.Name)
		if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
			t.Errorf("%s does not surface its log tail when it fails", c.Name)
		}
	}
	// Init containers run one after the other: kaniko has exited before push reads its output.
	if want := []string{BuildFetchContainer, BuildKanikoContainer, BuildPushContainer}; !slices.Equal(order, want) || len(pod.Containers) != 1 {
		t.Fatalf("steps %v (%d regular), want %v with push the only regular container", order, len(pod.Containers), want)
	}
	steps := containers(pod)
	kaniko, fetch, push := steps[BuildKanikoContainer], steps[BuildFetchContainer], steps[BuildPushContainer]
	if kaniko.Image != DefaultKanikoImage || !strings.Contains(kaniko.Image, "@sha256:") || fetch.Image != opts.SlessImage || push.Image != opts.SlessImage {
		t.Errorf("images %s, %s, %s: want the pinned kaniko and the platform's own", fetch.Image, kaniko.Image, push.Image)
	}
	for _, want := range []string{"--context=tar:///workspace/context.tar.gz", "--dockerfile=Dockerfile", "--no-push",
		"--oci-layout-path=/workspace/image", "--reproducible", "--cache=false", "--image-download-retry=3"} {
		if !slices.Contains(kaniko.Args, want) {
			t.Errorf("kaniko args %v lack %s", kaniko.Args, want)
		}
	}
	for _, want := range []string{"build-step", "fetch", "--key=contexts/sless-abc/hello/1.tar.gz", "--out=/workspace/context.tar.gz",
		"--s3-endpoint=http://s3.sless-system:7070", "--s3-bucket=sless", "--s3-region=us-east-1"} {
		if !slices.Contains(fetch.Args, want) {
			t.Errorf("fetch args %v lack %s", fetch.Args, want)
		}
	}
	dest := "--destination=registry.sless-system:5000/sless-abc/hello:sha-0123456789abcdef"
	if !slices.Equal(push.Args[:3], []string{"build-step", "push", "--layout=/workspace/image"}) || !slices.Contains(push.Args, dest) {
		t.Errorf("push args %v, want the layout pushed to %s", push.Args, dest)
	}
	if img, _ := ImageFor(target, opts.Build); img != strings.TrimPrefix(dest, "--destination=") {
		t.Errorf("ImageFor = %s", img)
	}

	registries := map[string]struct {
		insecure, mirrors []string
		kaniko, push      []string // args wanted
		absent            []string // arg prefixes no step has
	}{
		"defaults talk TLS and use Docker Hub": {
			absent: []string{"--insecure-registry=", "--registry-mirror="},
		},
		"plain-HTTP registry and a mirror": {
			insecure: []string{"registry.e2e:5000"}, mirrors: []string{"registry.e2e:5000", "mirror.example"},
			kaniko: []string{"--insecure-registry=registry.e2e:5000", "--registry-mirror=registry.e2e:5000", "--registry-mirror=mirror.example"},
			push:   []string{"--insecure-registry=registry.e2e:5000"},
		},
	}
	for name, tc := range registries {
		t.Run(name, func(t *testing.T) {
			o := opts
			o.Build.InsecureRegistries, o.Build.RegistryMirrors = tc.insecure, tc.mirrors
			j, err := MakeBuildJob(target, o)
			if err != nil {
				t.Fatal(err)
			}
			steps := containers(j.Spec.Template.Spec)
			for step, want := range map[string][]string{BuildKanikoContainer: tc.kaniko, BuildPushContainer: tc.push} {
				for _, w := range want {
					if !slices.Contains(steps[step].Args, w) {
						t.Errorf("%s args %v lack %s", step, steps[step].Args, w)
					}
				}
			}
			for _, c := range steps {
				for _, a := range c.Args {
					for _, prefix := range tc.absent {
						if strings.HasPrefix(a, prefix) {
							t.Errorf("%s: unexpected %s", c.Name, a)
						}
					}
				}
			}
		})
	}

	for name, bad := range map[string]BuildTarget{
		"no context":  {Namespace: "n", Name: "f", Label: LabelFunction, Source: v1.SourceRef{SHA256: sha}},
		"bad sha":     {Namespace: "n", Name: "f", Label: LabelFunction, Source: v1.SourceRef{ContextKey: "k", SHA256: "xyz"}},
		"no function": {Namespace: "n", Label: LabelFunction, Source: v1.SourceRef{ContextKey: "k", SHA256: sha}},
	} {
		if _, err := MakeBuildJob(bad, opts); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}

// secretsOf lists what credentials container c of pod can read, as "env:<secret>",
// "envFrom:<secret>", "volume:<secret>", "token" (a projected service-account token) or
// "configMap:<name>", so a test states the whole set a step holds.
func secretsOf(pod corev1.PodSpec, c corev1.Container) []string {
	var out []string
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			out = append(out, "env:"+e.ValueFrom.SecretKeyRef.Name)
		}
	}
	for _, e := range c.EnvFrom {
		if e.SecretRef != nil {
			out = append(out, "envFrom:"+e.SecretRef.Name)
		}
		if e.ConfigMapRef != nil {
			out = append(out, "configMap:"+e.ConfigMapRef.Name)
		}
	}
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			switch {
			case v.Name != m.Name:
			case v.Secret != nil:
				out = append(out, "volume:"+v.Secret.SecretName)
			case v.Projected != nil:
				for _, s := range v.Projected.Sources {
					if s.Secret != nil {
						out = append(out, "volume:"+s.Secret.Name)
					}
					if s.ServiceAccountToken != nil {
						out = append(out, "token")
					}
				}
			case v.EmptyDir == nil:
				out = append(out, "volume:"+v.Name+" (not an emptyDir)")
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestBuildStepsHoldOnlyTheirCredentials: the kaniko step, which runs a tenant's install
// steps, holds no credential at all — no Secret in its environment or files, no token, no
// variable but its image's — whatever credentials the operator configured; the fetch step
// holds only the artifact store's, the push step only the registry's; and the pod gets no
// service-account token, no Service links, no host namespaces and no shared process table.
func TestBuildStepsHoldOnlyTheirCredentials(t *testing.T) {
	cases := map[string]struct {
		s3Secret, registrySecret string
		want                     map[string][]string
	}{
		"both credentials configured": {s3Secret: "sless-s3", registrySecret: "registry-push", want: map[string][]string{
			BuildFetchContainer:  {"env:sless-s3"},
			BuildKanikoContainer: nil,
			BuildPushContainer:   {"volume:registry-push"},
		}},
		"no registry credential (anonymous pushes)": {s3Secret: "sless-s3", want: map[string][]string{
			BuildFetchContainer: {"env:sless-s3"}, BuildKanikoContainer: nil, BuildPushContainer: nil,
		}},
		"no credentials": {want: map[string][]string{
			BuildFetchContainer: nil, BuildKanikoContainer: nil, BuildPushContainer: nil,
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			opts := testOptions()
			opts.Build.S3Secret, opts.Build.RegistrySecret = tc.s3Secret, tc.registrySecret
			j, err := MakeBuildJob(buildTarget("sless-abc", "hello"), opts)
			if err != nil {
				t.Fatal(err)
			}
			pod := j.Spec.Template.Spec
			steps := containers(pod)
			for step, want := range tc.want {
				if got := secretsOf(pod, steps[step]); !slices.Equal(got, want) {
					t.Errorf("%s holds %v, want %v", step, got, want)
				}
			}
			kaniko := steps[BuildKanikoContainer]
			if len(kaniko.Env) != 0 || len(kaniko.EnvFrom) != 0 {
				t.Errorf("kaniko gets environment %v / %v, want none beyond its image's", kaniko.Env, kaniko.EnvFrom)
			}
			if len(kaniko.VolumeMounts) != 1 || kaniko.VolumeMounts[0].MountPath != buildWorkspace {
				t.Errorf("kaniko mounts %v, want the workspace alone", kaniko.VolumeMounts)
			}
			if fetch := steps[BuildFetchContainer]; tc.s3Secret != "" {
				for _, e := range fetch.Env {
					if k := e.ValueFrom.SecretKeyRef.Key; k != "AWS_ACCESS_KEY_ID" && k != "AWS_SECRET_ACCESS_KEY" {
						t.Errorf("fetch reads key %s of the S3 Secret", k)
					}
				}
			}
			push := steps[BuildPushContainer]
			for _, m := range push.VolumeMounts {
				if m.Name == "workspace" && !m.ReadOnly {
					t.Error("push mounts the workspace writable: it only reads the layout")
				}
			}
			for _, c := range []corev1.Container{steps[BuildFetchContainer], push} {
				sc := c.SecurityContext
				if sc == nil || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) || ptr.Deref(sc.AllowPrivilegeEscalation, true) ||
					sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
					t.Errorf("%s security context %+v: want a read-only root, no privilege escalation, no capabilities", c.Name, sc)
				}
			}
			// The fetch step writes as a user of its own; the push step reads kaniko's 0600
			// blobs as their owner, root, without CAP_DAC_OVERRIDE or any other capability.
			if sc := steps[BuildFetchContainer].SecurityContext; !ptr.Deref(sc.RunAsNonRoot, false) || ptr.Deref(sc.RunAsUser, 0) == 0 {
				t.Errorf("fetch runs as %v (non-root %v), want a user of its own", sc.RunAsUser, sc.RunAsNonRoot)
			}
			if sc := push.SecurityContext; ptr.Deref(sc.RunAsUser, -1) != 0 {
				t.Errorf("push runs as %v, want root (without capabilities) to read kaniko's blobs", sc.RunAsUser)
			}
			if ptr.Deref(pod.AutomountServiceAccountToken, true) || pod.ServiceAccountName != "" {
				t.Errorf("the build pod gets a service-account token (automount %v, account %q)", pod.AutomountServiceAccountToken, pod.ServiceAccountName)
			}
			if ptr.Deref(pod.EnableServiceLinks, true) || pod.HostNetwork || pod.HostPID || pod.HostIPC || ptr.Deref(pod.ShareProcessNamespace, false) {
				t.Error("the build pod shares the host's namespaces, its steps' processes or the namespace's Service links")
			}
		})
	}
}

// TestBuildPushesOnlyUnderTheTenantsRepositories: whatever a function (or job) and its
// namespace are called and however the registry is written, the one step that pushes pushes
// exactly <registry>/<namespace>/<name>:sha-<hash> — a repository of that namespace's own —
// and kaniko pushes nothing. Names that would leave the namespace's path render no Job.
func TestBuildPushesOnlyUnderTheTenantsRepositories(t *testing.T) {
	long := strings.Repeat("a", rules.MaxNameLength)
	cases := []struct {
		registry, ns, fn string
		repo             string // want; "" when no Job may be rendered
	}{
		{"registry.sless-system:5000", "sless-abc", "hello", "registry.sless-system:5000/sless-abc/hello"},
		{"registry.example.com/functions", "sless-abc", "hello", "registry.example.com/functions/sless-abc/hello"},
		{"registry.example.com/functions/", "sless-abc", "hello", "registry.example.com/functions/sless-abc/hello"},
		{"registry.example.com", "sless-0123abcd", long, "registry.example.com/sless-0123abcd/" + long},
		{"registry.example.com", "sless-abc", "sless-def", "registry.example.com/sless-abc/sless-def"},
		{"registry.example.com", "a", "b", "registry.example.com/a/b"},
		{"registry.example.com", "sless-abc", "../sless-def/hello", ""},
		{"registry.example.com", "sless-abc", "x/../../sless-def/hello", ""},
		{"registry.example.com", "sless-abc/..", "hello", ""},
		{"registry.example.com", "sless-abc", "Hello", ""},
		{"registry.example.com", "sless-abc", long + "a", ""},
		{"registry.example.com", "sless-abc", "hello:latest", ""},
		{"registry.example.com", "sless-abc", "hello@sha256", ""},
		{"registry.example.com", "", "hello", ""},
	}
	for _, tc := range cases {
		t.Run(tc.registry+" "+tc.ns+" "+tc.fn, func(t *testing.T) {
			opts := testOptions()
			opts.Build.Registry = tc.registry
			for _, label := range []string{LabelFunction, LabelJob} {
				target := buildTarget(tc.ns, tc.fn)
				target.Label = label
				j, err := MakeBuildJob(target, opts)
				if tc.repo == "" {
					if err == nil {
						t.Fatalf("rendered a build of %q in %q", tc.fn, tc.ns)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				var pushed []string
				for _, c := range containers(j.Spec.Template.Spec) {
					for _, a := range c.Args {
						if d, ok := strings.CutPrefix(a, "--destination="); ok {
							pushed = append(pushed, c.Name+" "+d)
						}
					}
					if c.Name == BuildKanikoContainer && !slices.Contains(c.Args, "--no-push") {
						t.Error("kaniko may push")
					}
				}
				if len(pushed) != 1 || !strings.HasPrefix(pushed[0], BuildPushContainer+" ") {
					t.Fatalf("destinations %v, want one, the push step's", pushed)
				}
				ref, err := name.NewTag(strings.TrimPrefix(pushed[0], BuildPushContainer+" "), name.StrictValidation)
				if err != nil {
					t.Fatal(err)
				}
				if got := ref.Context().RegistryStr() + "/" + ref.Context().RepositoryStr(); got != tc.repo || ref.TagStr() != "sha-"+sha[:16] {
					t.Errorf("pushes %s, want %s:sha-%s", ref, tc.repo, sha[:16])
				}
			}
		})
	}
}

// TestBuildDigest: the image a build reports is the push step's own message, by digest, in
// the repository it was told to push to — never another step's, another repository's, or a
// failed push's.
func TestBuildDigest(t *testing.T) {
	const dest = "registry.example/sless-abc/hello:sha-0123456789abcdef"
	digest := "registry.example/sless-abc/hello@sha256:" + strings.Repeat("e", 64)
	status := func(step, msg string, exit int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: step, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Message: msg}}}
	}
	cases := map[string]struct {
		init, main []corev1.ContainerStatus
		want       string
	}{
		"pushed":                        {main: []corev1.ContainerStatus{status(BuildPushContainer, digest+"\n", 0)}, want: digest},
		"another tenant's repository":   {main: []corev1.ContainerStatus{status(BuildPushContainer, "registry.example/sless-def/hello@sha256:"+strings.Repeat("e", 64), 0)}},
		"a tag, not a digest":           {main: []corev1.ContainerStatus{status(BuildPushContainer, dest, 0)}},
		"the push failed":               {main: []corev1.ContainerStatus{status(BuildPushContainer, digest, 1)}},
		"kaniko's message claims one":   {init: []corev1.ContainerStatus{status(BuildKanikoContainer, digest, 0)}},
		"no push has terminated":        {main: []corev1.ContainerStatus{{Name: BuildPushContainer}}},
		"a message of several lines":    {main: []corev1.ContainerStatus{status(BuildPushContainer, digest+"\n"+digest, 0)}},
		"an empty message, exit code 0": {main: []corev1.ContainerStatus{status(BuildPushContainer, "", 0)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: tc.init, ContainerStatuses: tc.main}}
			got, ok := BuildDigest(pod, dest)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("BuildDigest = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

func TestParseBuildEgress(t *testing.T) {
	tcp, udp := ptr.To(corev1.ProtocolTCP), ptr.To(corev1.ProtocolUDP)
	port := func(p *corev1.Protocol, n int32) networkingv1.NetworkPolicyPort {
		return networkingv1.NetworkPolicyPort{Protocol: p, Port: ptr.To(intstr.FromInt32(n))}
	}
	good := map[string]BuildEgress{
		"0.0.0.0/0":                          {Prefix: netip.MustParsePrefix("0.0.0.0/0")},
		"::/0":                               {Prefix: netip.MustParsePrefix("::/0")},
		"0.0.0.0/0:443,80":                   {Prefix: netip.MustParsePrefix("0.0.0.0/0"), Ports: []networkingv1.NetworkPolicyPort{port(tcp, 443), port(tcp, 80)}},
		"10.20.0.5/32:5000":                  {Prefix: netip.MustParsePrefix("10.20.0.5/32"), Ports: []networkingv1.NetworkPolicyPort{port(tcp, 5000)}},
		"169.254.20.10/32:53/udp,53/tcp":     {Prefix: netip.MustParsePrefix("169.254.20.10/32"), Ports: []networkingv1.NetworkPolicyPort{port(udp, 53), port(tcp, 53)}},
		"2001:db8::/32:443":                  {Prefix: netip.MustParsePrefix("2001:db8::/32"), Ports: []networkingv1.NetworkPolicyPort{port(tcp, 443)}},
		"fd00:ec2::/32:8443/TCP":             {Prefix: netip.MustParsePrefix("fd00:ec2::/32"), Ports: []networkingv1.NetworkPolicyPort{port(tcp, 8443)}},
		"192.0.2.0/24:9000/sctp":             {Prefix: netip.MustParsePrefix("192.0.2.0/24"), Ports: []networkingv1.NetworkPolicyPort{port(ptr.To(corev1.ProtocolSCTP), 9000)}},
		"198.51.100.0/24:1,65535":            {Prefix: netip.MustParsePrefix("198.51.100.0/24"), Ports: []networkingv1.NetworkPolicyPort{port(tcp, 1), port(tcp, 65535)}},
		"203.0.113.0/24:443/tcp,443/udp,853": {Prefix: netip.MustParsePrefix("203.0.113.0/24"), Ports: []networkingv1.NetworkPolicyPort{port(tcp, 443), port(udp, 443), port(tcp, 853)}},
	}
	for in, want := range good {
		got, err := ParseBuildEgress(in)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got.Prefix != want.Prefix || !slices.EqualFunc(got.Ports, want.Ports, func(a, b networkingv1.NetworkPolicyPort) bool {
			return *a.Protocol == *b.Protocol && *a.Port == *b.Port
		}) {
			t.Errorf("%s = %+v, want %+v", in, got, want)
		}
		if again, err := ParseBuildEgress(got.String()); err != nil || again.String() != got.String() {
			t.Errorf("%s: String %q does not read back (%v)", in, got.String(), err)
		}
	}
	for in, why := range map[string]string{
		"":                     "want CIDR",
		"10.0.0.1":             "want CIDR",
		"registry.example:443": "want CIDR",
		"10.0.0.1/8":           "did you mean 10.0.0.0/8",
		"10.0.0.0/33":          "out of range",
		"10.0.0.0/8:":          "port",
		"10.0.0.0/8:0":         "port",
		"10.0.0.0/8:65536":     "port",
		"10.0.0.0/8:http":      "port",
		"10.0.0.0/8:53/icmp":   "protocol",
		"10.0.0.0/8:443,":      "port",
		"::1/128:":             "port",
	} {
		if _, err := ParseBuildEgress(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: error %v, want one saying %q", in, err, why)
		}
	}
}

func FuzzParseBuildEgress(f *testing.F) {
	for _, s := range []string{"0.0.0.0/0", "10.20.0.5/32:5000", "::/0:443/udp,80", "1.2.3.4/32:53/udp,53/tcp"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseBuildEgress(s)
		if err != nil {
			return
		}
		// What parses renders a valid block and reads back the same.
		if e.Prefix != e.Prefix.Masked() {
			t.Fatalf("%q: %s has host bits", s, e.Prefix)
		}
		if again, err := ParseBuildEgress(e.String()); err != nil || again.String() != e.String() {
			t.Fatalf("%q: %q does not read back: %v", s, e.String(), err)
		}
	})
}

// TestMakeBuildNetworkPolicy: build pods take no connection and make only these: DNS in
// kube-system, the registry and artifact store where the operator found them, and the egress
// ranges — which never reach a private, link-local (metadata) or CGNAT address, nor the API
// server, unless the operator names such an address itself.
func TestMakeBuildNetworkPolicy(t *testing.T) {
	opts := testOptions().Build
	apiServer := netip.MustParsePrefix("34.118.0.10/32") // a public API endpoint
	reach := BuildReach{
		Endpoints: []BuildEndpoint{
			{Namespace: "sless-system", Selector: map[string]string{"app": "registry"}, Ports: []intstr.IntOrString{intstr.FromInt32(5000)}},
			{Prefixes: []netip.Prefix{netip.MustParsePrefix("10.244.0.1/32")}, Ports: []intstr.IntOrString{intstr.FromInt32(19200)}},
		},
		Never: []netip.Prefix{apiServer},
	}
	opts.Egress = append(slices.Clone(DefaultBuildEgress), BuildEgress{Prefix: netip.MustParsePrefix("10.20.0.5/32"),
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(8080))}}})
	np := MakeBuildNetworkPolicy(opts, reach)
	if np.Namespace != opts.Namespace || np.Name != BuildNetworkPolicyName || np.Labels[LabelManagedBy] != managedBy {
		t.Errorf("policy %s/%s labels %v", np.Namespace, np.Name, np.Labels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) || len(np.Spec.Ingress) != 0 {
		t.Errorf("policy types %v, ingress %v: want every connection to a build pod refused", np.Spec.PolicyTypes, np.Spec.Ingress)
	}
	// The policy selects every build pod and nothing else the platform runs beside them.
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	j, err := MakeBuildJob(buildTarget("sless-abc", "hello"), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(j.Spec.Template.Labels)) {
		t.Errorf("the policy %s does not select build pods %v", sel, j.Spec.Template.Labels)
	}
	fj := &v1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "once", Namespace: "sless-abc"}}
	for _, other := range []map[string]string{JobLabels(fj), {LabelManagedBy: managedBy, LabelFunction: "hello", LabelFunctionNamespace: "sless-abc"}} {
		if sel.Matches(labels.Set(other)) {
			t.Errorf("the policy selects %v too", other)
		}
	}

	egress := np.Spec.Egress
	if len(egress) != 1+2+3 {
		t.Fatalf("%d egress rules, want DNS, 2 endpoints, 3 ranges: %+v", len(egress), egress)
	}
	dns := egress[0]
	if ns := dns.To[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName]; ns != "kube-system" || len(dns.Ports) != 2 || dns.Ports[0].Port.IntVal != 53 {
		t.Errorf("DNS rule %+v", dns)
	}
	reg := egress[1]
	if p := reg.To[0]; p.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "sless-system" || p.PodSelector.MatchLabels["app"] != "registry" || reg.Ports[0].Port.IntVal != 5000 {
		t.Errorf("registry rule %+v", reg)
	}
	if s3 := egress[2]; s3.To[0].IPBlock.CIDR != "10.244.0.1/32" || len(s3.To[0].IPBlock.Except) != 0 || s3.Ports[0].Port.IntVal != 19200 {
		t.Errorf("artifact store rule %+v", s3)
	}
	v4, v6, internal := egress[3].To[0].IPBlock, egress[4].To[0].IPBlock, egress[5].To[0].IPBlock
	for _, want := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10", "127.0.0.0/8", apiServer.String()} {
		if v4.CIDR != "0.0.0.0/0" || !slices.Contains(v4.Except, want) || len(egress[3].Ports) != 0 {
			t.Errorf("public IPv4 block %+v (ports %v) does not leave out %s", v4, egress[3].Ports, want)
		}
	}
	for _, want := range []string{"fc00::/7", "fe80::/10", "::1/128"} {
		if v6.CIDR != "::/0" || !slices.Contains(v6.Except, want) || slices.Contains(v6.Except, "10.0.0.0/8") {
			t.Errorf("public IPv6 block %+v does not leave out %s (or holds IPv4 exceptions)", v6, want)
		}
	}
	if internal.CIDR != "10.20.0.5/32" || len(internal.Except) != 0 || egress[5].Ports[0].Port.IntVal != 8080 {
		t.Errorf("an internal address the operator named: %+v %v", internal, egress[5].Ports)
	}
}

func TestBuildFailure(t *testing.T) {
	done := func(step string, exit int32, msg string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: step, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Message: msg}}}
	}
	waiting := func(step string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: step, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}
	}
	cases := map[string]struct {
		init, main []corev1.ContainerStatus
		want       string
	}{
		"the fetch failed": {init: []corev1.ContainerStatus{done(BuildFetchContainer, 1, "sless: object not found\n"), waiting(BuildKanikoContainer)},
			main: []corev1.ContainerStatus{waiting(BuildPushContainer)}, want: "fetching the build context failed: sless: object not found"},
		"kaniko failed: its log tail as it is": {init: []corev1.ContainerStatus{done(BuildFetchContainer, 0, ""), done(BuildKanikoContainer, 1, "SyntaxError: invalid syntax")},
			main: []corev1.ContainerStatus{waiting(BuildPushContainer)}, want: "SyntaxError: invalid syntax"},
		"the push refused the layout": {init: []corev1.ContainerStatus{done(BuildFetchContainer, 0, ""), done(BuildKanikoContainer, 0, "")},
			main: []corev1.ContainerStatus{done(BuildPushContainer, 1, "sless: the build's output is not a plain OCI layout: image/index.json is a symbolic link")},
			want: "pushing the image failed: sless: the build's output is not a plain OCI layout: image/index.json is a symbolic link"},
		"killed without a message": {init: []corev1.ContainerStatus{done(BuildFetchContainer, 0, ""), done(BuildKanikoContainer, 137, "")},
			want: "exit code 137"},
		"stopped while running (a deadline)": {init: []corev1.ContainerStatus{done(BuildFetchContainer, 0, ""), {Name: BuildKanikoContainer}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: tc.init, ContainerStatuses: tc.main}}
			if got := BuildFailure(pod); got != tc.want {
				t.Errorf("BuildFailure = %q, want %q", got, tc.want)
			}
		})
	}
}
