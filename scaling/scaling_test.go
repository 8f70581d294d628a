package scaling

import (
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "sless.dev/sless/apis/v1alpha1"
)

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func testOptions() Options {
	o := DefaultOptions()
	o.SlessImage = "registry.example/sless:test"
	o.Build.S3Endpoint = "http://s3.sless-system:7070"
	o.Build.RegistrySecret = "registry-push"
	o.HistorySecret = "sless-history"
	o.IdentityMaster = testMaster
	return o
}

// testMaster is the platform's master key in these tests.
var testMaster = []byte("0123456789abcdef0123456789abcdef")

// mutated is a fixture with a test's changes applied.
func mutated[T any](v T, mut []func(T)) T {
	for _, m := range mut {
		m(v)
	}
	return v
}

func testFunction(mut ...func(*v1.Function)) *v1.Function {
	return mutated(&v1.Function{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "sless-abc", UID: "uid-1"},
		Spec: v1.FunctionSpec{
			CodeSpec: v1.CodeSpec{
				Runtime:  v1.RuntimePython311,
				Env:      map[string]string{"ZED": "z", "ALPHA": "a", "MID": "m"},
				MemoryMB: 256,
				Source:   &v1.SourceRef{ContextKey: "contexts/sless-abc/hello/1.tar.gz", SHA256: sha},
			},
			Scale: v1.ScaleSpec{MinReplicas: 0, MaxReplicas: 5, ScaleDownPeriodSeconds: 60, Metric: v1.ScaleOnConcurrency, Target: 10},
		},
	}, mut)
}

// testRevision is fn's first revision, built into image.
func testRevision(fn *v1.Function, image string) *v1.Revision {
	rev := MakeRevision(fn, 1)
	rev.UID, rev.Status.Image = "rev-uid-1", image
	return rev
}

func envMap(env []corev1.EnvVar) map[string]string {
	m := map[string]string{}
	for _, e := range env {
		m[e.Name] = e.Value
	}
	return m
}

func TestMakeDeployment(t *testing.T) {
	cases := map[string]struct {
		fn    *v1.Function
		check func(t *testing.T, fn *v1.Function)
	}{
		"env sorted, user keys first": {
			fn: testFunction(),
			check: func(t *testing.T, fn *v1.Function) {
				d := MakeDeployment(fn, testRevision(fn, "reg/img:sha-1"), nil, testOptions())
				env := d.Spec.Template.Spec.Containers[0].Env
				var names []string
				for _, e := range env[:3] {
					names = append(names, e.Name)
				}
				if got := strings.Join(names, ","); got != "ALPHA,MID,ZED" {
					t.Errorf("user env order = %s, want ALPHA,MID,ZED", got)
				}
				m := envMap(env)
				if m["PORT"] != "8080" || m["SLESS_TIMEOUT_SECONDS"] != "0" || m["SLESS_FUNCTION"] != "hello" {
					t.Errorf("platform env = %v", m)
				}
			},
		},
		"memory limit from memoryMB, readiness on /healthz": {
			fn: testFunction(),
			check: func(t *testing.T, fn *v1.Function) {
				c := MakeDeployment(fn, testRevision(fn, "img"), nil, testOptions()).Spec.Template.Spec.Containers[0]
				if got := c.Resources.Limits.Memory().String(); got != "256Mi" {
					t.Errorf("memory limit = %s", got)
				}
				if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds != preStopSeconds {
					t.Errorf("preStop = %+v, want a %d s sleep before SIGTERM", c.Lifecycle, preStopSeconds)
				}
				if c.ReadinessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Port.StrVal != "http" {
					t.Errorf("readiness probe = %+v", c.ReadinessProbe.HTTPGet)
				}
			},
		},
		"h2c: Service port says kubernetes.io/h2c, readiness is a TCP probe": {
			fn: testFunction(func(f *v1.Function) { f.Spec.Source, f.Spec.Image, f.Spec.Protocol = nil, "reg/grpc:1", "h2c" }),
			check: func(t *testing.T, fn *v1.Function) {
				rev := testRevision(fn, "reg/grpc@sha256:"+sha)
				c := MakeDeployment(fn, rev, nil, testOptions()).Spec.Template.Spec.Containers[0]
				if p := c.ReadinessProbe; p.HTTPGet != nil || p.TCPSocket == nil || p.TCPSocket.Port.StrVal != "http" {
					t.Errorf("readiness probe = %+v, want a TCP probe of the http port", p.ProbeHandler)
				}
				sp := MakeService(rev).Spec.Ports[0]
				if sp.AppProtocol == nil || *sp.AppProtocol != "kubernetes.io/h2c" || sp.Name != "http" {
					t.Errorf("service port = %+v, want appProtocol kubernetes.io/h2c", sp)
				}
				http1 := testFunction()
				if sp := MakeService(testRevision(http1, "img")).Spec.Ports[0]; sp.AppProtocol != nil {
					t.Errorf("an http1 function's port has appProtocol %q", *sp.AppProtocol)
				}
			},
		},
		"image change changes the pod template (rollout)": {
			fn: testFunction(),
			check: func(t *testing.T, fn *v1.Function) {
				a := MakeDeployment(fn, testRevision(fn, "img:1"), nil, testOptions())
				b := MakeDeployment(fn, testRevision(fn, "img:2"), nil, testOptions())
				if a.Spec.Template.Spec.Containers[0].Image == b.Spec.Template.Spec.Containers[0].Image {
					t.Error("image not in the pod template")
				}
			},
		},
		"min replicas as initial replicas, owner reference to the revision": {
			fn: testFunction(func(f *v1.Function) { f.Spec.Scale.MinReplicas = 2 }),
			check: func(t *testing.T, fn *v1.Function) {
				d := MakeDeployment(fn, testRevision(fn, "img"), nil, testOptions())
				if *d.Spec.Replicas != 2 {
					t.Errorf("replicas = %d", *d.Spec.Replicas)
				}
				if len(d.OwnerReferences) != 1 || d.OwnerReferences[0].Kind != "Revision" || d.OwnerReferences[0].Name != "hello-1" || !*d.OwnerReferences[0].Controller {
					t.Errorf("owner refs = %+v", d.OwnerReferences)
				}
			},
		},
		"long timeout extends the grace period, entrypoint passed": {
			fn: testFunction(func(f *v1.Function) { f.Spec.TimeoutSeconds = 120; f.Spec.Entrypoint = "main.run" }),
			check: func(t *testing.T, fn *v1.Function) {
				d := MakeDeployment(fn, testRevision(fn, "img"), nil, testOptions())
				if *d.Spec.Template.Spec.TerminationGracePeriodSeconds != 125 {
					t.Errorf("grace = %d", *d.Spec.Template.Spec.TerminationGracePeriodSeconds)
				}
				m := envMap(d.Spec.Template.Spec.Containers[0].Env)
				if m["SLESS_HANDLER"] != "main.run" || m["SLESS_TIMEOUT_SECONDS"] != "120" {
					t.Errorf("env = %v", m)
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) { tc.check(t, tc.fn) })
	}
}

func TestMakeDeploymentIsDeterministic(t *testing.T) {
	fn := testFunction()
	a := MakeDeployment(fn, testRevision(fn, "img"), nil, testOptions())
	for range 20 {
		b := MakeDeployment(fn, testRevision(fn, "img"), nil, testOptions())
		if !equalEnv(a.Spec.Template.Spec.Containers[0].Env, b.Spec.Template.Spec.Containers[0].Env) {
			t.Fatal("env order differs between renders of the same function")
		}
	}
}

func equalEnv(a, b []corev1.EnvVar) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Value != b[i].Value {
			return false
		}
	}
	return true
}

func TestMakeHTTPScaledObject(t *testing.T) {
	cases := map[string]struct {
		fn     *v1.Function
		paused bool
		check  func(t *testing.T, fn *v1.Function, paused bool)
	}{
		"host, target, replicas, cooldown, concurrency": {
			fn: testFunction(),
			check: func(t *testing.T, fn *v1.Function, paused bool) {
				h := MakeHTTPScaledObject(fn, testRevision(fn, ""), paused, testOptions())
				if h.Spec.Hosts[0] != "hello-1.sless-abc.rev.fn.sless.local" {
					t.Errorf("host = %v", h.Spec.Hosts)
				}
				r := h.Spec.ScaleTargetRef
				if r.Name != "hello-1" || r.Service != "hello-1" || r.Port != 8080 || r.Kind != "Deployment" {
					t.Errorf("target = %+v", r)
				}
				if *h.Spec.Replicas.Min != 0 || *h.Spec.Replicas.Max != 5 || *h.Spec.CooldownPeriod != 60 {
					t.Errorf("replicas/cooldown = %d/%d/%d", *h.Spec.Replicas.Min, *h.Spec.Replicas.Max, *h.Spec.CooldownPeriod)
				}
				if h.Spec.ScalingMetric.Concurrency == nil || h.Spec.ScalingMetric.Concurrency.TargetValue != 10 || h.Spec.ScalingMetric.Rate != nil {
					t.Errorf("metric = %+v", h.Spec.ScalingMetric)
				}
				if h.Spec.Timeouts.ResponseHeader.Duration != noLimit {
					t.Errorf("timeout 0 must not be limited by the interceptor: %s", h.Spec.Timeouts.ResponseHeader.Duration)
				}
				if len(h.Annotations) != 0 {
					t.Errorf("annotations = %v", h.Annotations)
				}
			},
		},
		"request rate and timeout": {
			fn: testFunction(func(f *v1.Function) { f.Spec.Scale.Metric = v1.ScaleOnRequestRate; f.Spec.TimeoutSeconds = 30 }),
			check: func(t *testing.T, fn *v1.Function, paused bool) {
				h := MakeHTTPScaledObject(fn, testRevision(fn, ""), paused, testOptions())
				if h.Spec.ScalingMetric.Rate == nil || h.Spec.ScalingMetric.Rate.TargetValue != 10 || h.Spec.ScalingMetric.Concurrency != nil {
					t.Errorf("metric = %+v", h.Spec.ScalingMetric)
				}
				if h.Spec.Timeouts.ResponseHeader.Duration != 35*time.Second {
					t.Errorf("response header timeout = %s", h.Spec.Timeouts.ResponseHeader.Duration)
				}
			},
		},
		"paused pins zero replicas": {
			fn: testFunction(), paused: true,
			check: func(t *testing.T, fn *v1.Function, paused bool) {
				h := MakeHTTPScaledObject(fn, testRevision(fn, ""), paused, testOptions())
				if h.Annotations[AnnotationPausedReplicas] != "0" {
					t.Errorf("annotations = %v", h.Annotations)
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) { tc.check(t, tc.fn, tc.paused) })
	}
}

func eventTrigger(mut ...func(*v1.Trigger)) *v1.Trigger {
	return mutated(&v1.Trigger{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "sless-abc", UID: "uid-2"},
		Spec: v1.TriggerSpec{
			Type: v1.TriggerEvent, FunctionRef: v1.LocalObjectReference{Name: "hello"}, Enabled: ptr.To(true),
			Event: &v1.EventSpec{
				Queue: "orders", BrokerSecretRef: v1.SecretKeyReference{Name: "amqp", Key: "url"},
				QueueLength: 5, MaxJobs: 3, Retry: v1.RetryPolicy{MaxAttempts: 4, BackoffMillis: 500},
			},
		},
	}, mut)
}

func cronTrigger(mut ...func(*v1.Trigger)) *v1.Trigger {
	return mutated(&v1.Trigger{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "sless-abc", UID: "uid-3"},
		Spec: v1.TriggerSpec{
			Type: v1.TriggerCron, FunctionRef: v1.LocalObjectReference{Name: "hello"},
			Cron: &v1.CronSpec{Schedule: "0 3 * * *", Timezone: "Europe/Berlin", ConcurrencyPolicy: "Forbid", StartingDeadlineSeconds: 60},
		},
	}, mut)
}

func TestMakeScaledJob(t *testing.T) {
	cases := map[string]struct {
		tr    *v1.Trigger
		check func(t *testing.T, tr *v1.Trigger)
	}{
		"rabbitmq scaler with auth, dispatcher through the interceptor": {
			tr: eventTrigger(),
			check: func(t *testing.T, tr *v1.Trigger) {
				sj := MakeScaledJob(tr, testFunction(), testOptions())
				trg := sj.Spec.Triggers[0]
				if trg.Type != "rabbitmq" || trg.Metadata["queueName"] != "orders" || trg.Metadata["mode"] != "QueueLength" || trg.Metadata["value"] != "5" {
					t.Errorf("trigger = %+v", trg)
				}
				if trg.AuthenticationRef.Name != TriggerAuthenticationName(tr) || *sj.Spec.MaxReplicaCount != 3 {
					t.Errorf("auth ref / max = %+v %d", trg.AuthenticationRef, *sj.Spec.MaxReplicaCount)
				}
				c := sj.Spec.JobTargetRef.Template.Spec.Containers[0]
				for _, want := range []string{"dispatcher", "--queue=orders", "--dead-letter-queue=orders.dlq", "--max-attempts=4",
					"--backoff=500ms", "--exit-when-empty", "--function=sless-abc/hello", "--target-host=hello.sless-abc.fn.sless.local",
					"--target-url=http://keda-add-ons-http-interceptor-proxy.keda:8080"} {
					if !slices.Contains(c.Args, want) {
						t.Errorf("args %v lack %s", c.Args, want)
					}
				}
				if c.Env[0].Name != "SLESS_AMQP_URL" || c.Env[0].ValueFrom.SecretKeyRef.Name != "amqp" || c.Env[0].ValueFrom.SecretKeyRef.Key != "url" {
					t.Errorf("amqp env = %+v", c.Env[0])
				}
				if sj.Annotations[AnnotationPaused] != "" {
					t.Errorf("enabled trigger paused: %v", sj.Annotations)
				}
			},
		},
		"disabled pauses in place, explicit dead-letter queue": {
			tr: eventTrigger(func(tr *v1.Trigger) { tr.Spec.Enabled = ptr.To(false); tr.Spec.Event.DeadLetterQueue = "dead" }),
			check: func(t *testing.T, tr *v1.Trigger) {
				sj := MakeScaledJob(tr, testFunction(), testOptions())
				if sj.Annotations[AnnotationPaused] != "true" {
					t.Errorf("annotations = %v", sj.Annotations)
				}
				if !slices.Contains(sj.Spec.JobTargetRef.Template.Spec.Containers[0].Args, "--dead-letter-queue=dead") {
					t.Error("explicit dead-letter queue not passed")
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) { tc.check(t, tc.tr) })
	}

	ta := MakeTriggerAuthentication(eventTrigger())
	if ref := ta.Spec.SecretTargetRef[0]; ref.Parameter != "host" || ref.Name != "amqp" || ref.Key != "url" {
		t.Errorf("trigger authentication = %+v", ta.Spec.SecretTargetRef)
	}
}

func TestMakeAsyncScaledJob(t *testing.T) {
	opts := testOptions()
	opts.AsyncSecret = "sless-gateway"
	cases := map[string]struct {
		async    v1.AsyncSpec
		wantArgs []string
		maxJobs  int32
	}{
		"defaults": {async: v1.AsyncSpec{Enabled: true, Retry: v1.RetryPolicy{MaxAttempts: 3, BackoffMillis: 1000}},
			wantArgs: []string{"--dead-letter-queue=sless-abc.async.hello.dlq", "--max-attempts=3", "--backoff=1s"}, maxJobs: 1},
		"own dead-letter queue and limits": {async: v1.AsyncSpec{Enabled: true, Retry: v1.RetryPolicy{MaxAttempts: 7, BackoffMillis: 250}, DeadLetterQueue: "sless-abc.failed", MaxJobs: 4},
			wantArgs: []string{"--dead-letter-queue=sless-abc.failed", "--max-attempts=7", "--backoff=250ms"}, maxJobs: 4},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fn := testFunction(func(fn *v1.Function) { fn.Spec.Async = tc.async })
			sj := MakeAsyncScaledJob(fn, opts)
			if sj.Namespace != opts.Build.Namespace || sj.Name != "async-sless-abc-hello" || len(sj.OwnerReferences) != 0 {
				t.Errorf("placed at %s/%s owned by %v", sj.Namespace, sj.Name, sj.OwnerReferences)
			}
			if sj.Labels[LabelFunctionNamespace] != "sless-abc" || sj.Labels[LabelFunction] != "hello" {
				t.Errorf("labels %v", sj.Labels)
			}
			c := sj.Spec.JobTargetRef.Template.Spec.Containers[0]
			for _, want := range append(tc.wantArgs, "dispatcher", "--async", "--queue=sless-abc.async.hello", "--exit-when-empty",
				"--function=sless-abc/hello", "--target-host=hello.sless-abc.fn.sless.local") {
				if !slices.Contains(c.Args, want) {
					t.Errorf("args %v lack %s", c.Args, want)
				}
			}
			if len(c.Env) != 3 || c.Env[0].ValueFrom.SecretKeyRef.Name != "sless-gateway" || c.Env[0].ValueFrom.SecretKeyRef.Key != "SLESS_AMQP_URL" ||
				c.Env[1].ValueFrom.SecretKeyRef.Key != "SLESS_DATABASE_URL" || c.Env[2].ValueFrom.SecretKeyRef.Name != "sless-identity" {
				t.Errorf("env %+v: only the platform secret's two keys and the identity master, never a tenant's secret", c.Env)
			}
			if *sj.Spec.MaxReplicaCount != tc.maxJobs || sj.Spec.Triggers[0].AuthenticationRef.Name != sj.Name {
				t.Errorf("max %d, auth %v", *sj.Spec.MaxReplicaCount, sj.Spec.Triggers[0].AuthenticationRef)
			}
		})
	}
	ta := MakeAsyncTriggerAuthentication(testFunction(), opts)
	if ref := ta.Spec.SecretTargetRef[0]; ta.Namespace != opts.Build.Namespace || ref.Parameter != "host" || ref.Name != "sless-gateway" || ref.Key != "SLESS_AMQP_URL" {
		t.Errorf("trigger authentication %s: %+v", ta.Namespace, ta.Spec.SecretTargetRef)
	}
}

func TestMakeCronJob(t *testing.T) {
	cases := map[string]struct {
		tr    *v1.Trigger
		check func(t *testing.T, cj *batchv1.CronJob)
	}{
		"schedule, timezone, policy, deadline, fire mode": {
			tr: cronTrigger(),
			check: func(t *testing.T, cj *batchv1.CronJob) {
				if cj.Spec.Schedule != "0 3 * * *" || *cj.Spec.TimeZone != "Europe/Berlin" || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent || *cj.Spec.StartingDeadlineSeconds != 60 {
					t.Errorf("spec = %+v", cj.Spec)
				}
				if *cj.Spec.Suspend {
					t.Error("enabled trigger suspended")
				}
				args := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Args
				if !slices.Contains(args, "fire") || !slices.Contains(args, "--schedule=0 3 * * *") || !slices.Contains(args, "--timezone=Europe/Berlin") {
					t.Errorf("args = %v", args)
				}
				if *cj.Spec.JobTemplate.Spec.BackoffLimit != 0 {
					t.Error("pod retries would double-fire a tick")
				}
			},
		},
		"disabled suspends, no timezone": {
			tr: cronTrigger(func(tr *v1.Trigger) { tr.Spec.Enabled = ptr.To(false); tr.Spec.Cron.Timezone = "" }),
			check: func(t *testing.T, cj *batchv1.CronJob) {
				if !*cj.Spec.Suspend || cj.Spec.TimeZone != nil {
					t.Errorf("suspend=%v tz=%v", *cj.Spec.Suspend, cj.Spec.TimeZone)
				}
			},
		},
		"long names fit the CronJob limit": {
			tr: cronTrigger(func(tr *v1.Trigger) { tr.Name = strings.Repeat("n", 63) }),
			check: func(t *testing.T, cj *batchv1.CronJob) {
				if len(cj.Name) > 52 {
					t.Errorf("name %q has %d characters", cj.Name, len(cj.Name))
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) { tc.check(t, MakeCronJob(tc.tr, testFunction(), testOptions())) })
	}
}

func TestMakeRunJob(t *testing.T) {
	fj := &v1.FunctionJob{
		ObjectMeta: metav1.ObjectMeta{Name: "report", Namespace: "sless-abc", UID: "uid-4"},
		Spec: v1.FunctionJobSpec{
			FunctionRef: &v1.LocalObjectReference{Name: "hello"},
			Event:       &apiextensionsv1.JSON{Raw: []byte(`{"day":"mon"}`)},
			RunID:       3,
		},
	}
	code := testFunction(func(f *v1.Function) { f.Spec.TimeoutSeconds = 10 }).Spec.CodeSpec
	j := MakeRunJob(fj, &code, "img:1", testOptions())
	if j.Name != "report-run-3" || j.OwnerReferences[0].Kind != "FunctionJob" {
		t.Errorf("name %s owners %+v", j.Name, j.OwnerReferences)
	}
	m := envMap(j.Spec.Template.Spec.Containers[0].Env)
	if m["SLESS_MODE"] != "job" || m["SLESS_EVENT"] != `{"day":"mon"}` || m["SLESS_TERMINATION_LOG"] != "/dev/termination-log" {
		t.Errorf("env = %v", m)
	}
	if *j.Spec.ActiveDeadlineSeconds != 15 || *j.Spec.BackoffLimit != 0 || j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("spec = %+v", j.Spec)
	}
	fj.Spec.Event = nil
	if m := envMap(MakeRunJob(fj, &code, "img", testOptions()).Spec.Template.Spec.Containers[0].Env); m["SLESS_EVENT"] != "null" {
		t.Errorf("no event must be JSON null, got %q", m["SLESS_EVENT"])
	}
}

func TestChildName(t *testing.T) {
	long := strings.Repeat("a", 60)
	cases := map[string]struct {
		max   int
		parts []string
		want  string
	}{
		"short stays":       {63, []string{"fn", "build", "abc"}, "fn-build-abc"},
		"long is truncated": {20, []string{long, "x"}, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := childName(tc.max, tc.parts...)
			if len(got) > tc.max {
				t.Errorf("%q longer than %d", got, tc.max)
			}
			if tc.want != "" && got != tc.want {
				t.Errorf("got %q want %q", got, tc.want)
			}
		})
	}
	if childName(20, long, "x") == childName(20, long, "y") {
		t.Error("distinct long names collide")
	}
}

// TestPullSecretOnlyForOwnImages: the platform's pull secret goes with a function pod (a
// Deployment's or a job run's) only when its image is the namespace's own in the platform
// registry.
func TestPullSecretOnlyForOwnImages(t *testing.T) {
	opts := testOptions()
	opts.ImagePullSecret = "registry-pull"
	reg := opts.Build.Registry
	cases := []struct {
		name, ns, image string
		want            bool
	}{
		{"own built image", "sless-abc", reg + "/sless-abc/hello:sha-0123456789abcdef", true},
		{"own prebuilt image by digest", "sless-abc", reg + "/sless-abc/tool@sha256:" + sha, true},
		{"another tenant's built image", "sless-abc", reg + "/sless-xyz/hello:sha-0123456789abcdef", false},
		{"a namespace that prefixes another", "sless-ab", reg + "/sless-abc/hello:1", false},
		{"platform registry outside any namespace", "sless-abc", reg + "/hello:1", false},
		{"another registry", "sless-abc", "ghcr.io/sless-abc/hello:1", false},
		{"loaded into the nodes", "sless-abc", "ko.local/hello:1", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fn := testFunction(func(f *v1.Function) { f.Namespace = c.ns })
			fj := &v1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: "report", Namespace: c.ns}, Spec: v1.FunctionJobSpec{RunID: 1}}
			for kind, pod := range map[string]corev1.PodSpec{
				"deployment": MakeDeployment(fn, testRevision(fn, c.image), nil, opts).Spec.Template.Spec,
				"run job":    MakeRunJob(fj, &fn.Spec.CodeSpec, c.image, opts).Spec.Template.Spec,
			} {
				got := len(pod.ImagePullSecrets) == 1 && pod.ImagePullSecrets[0].Name == "registry-pull"
				if got != c.want || len(pod.ImagePullSecrets) > 1 {
					t.Errorf("%s: pull secrets %v, want the platform's: %v", kind, pod.ImagePullSecrets, c.want)
				}
			}
		})
	}
	opts.ImagePullSecret = ""
	if s := MakeDeployment(testFunction(), testRevision(testFunction(), reg+"/sless-abc/hello:1"), nil, opts).Spec.Template.Spec.ImagePullSecrets; len(s) != 0 {
		t.Errorf("no --image-pull-secret: %v", s)
	}
}

func TestBuildOptionsValidate(t *testing.T) {
	cases := map[string]struct {
		mut  func(*Options)
		want string // "" when valid
	}{
		"defaults":        {mut: func(*Options) {}},
		"a cap of builds": {mut: func(o *Options) { o.Build.MaxConcurrent = 2 }},
		"negative cap":    {mut: func(o *Options) { o.Build.MaxConcurrent = -1 }, want: "max concurrent builds must be 0 (no cap) or more, got -1"},
		"no deadline":     {mut: func(o *Options) { o.Build.Deadline = 0 }, want: "build deadline must be positive"},
		"no master key":   {mut: func(o *Options) { o.IdentityMaster = nil }, want: "identity master key must be 32 bytes, got 0"},
		"a cold start held past a signature's window": {mut: func(o *Options) { o.ColdStartTimeout = 11 * time.Minute },
			want: "cold start timeout 11m0s is above 10m0s"},
		"network policies without the interceptor's pods": {mut: func(o *Options) { o.Network.InterceptorPods = nil },
			want: "the interceptor's namespace and pod labels are required"},
		"no network policies, no interceptor needed": {mut: func(o *Options) { o.Network = NetworkOptions{} }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := testOptions()
			tc.mut(&o)
			err := o.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}
