package scaling

import (
	"sless.dev/sless/rules"

	"strconv"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/triggers"
	"sless.dev/sless/triggers/kind"
)

// TriggerLabels select a trigger's children.
func TriggerLabels(tr *v1.Trigger) map[string]string {
	return map[string]string{LabelManagedBy: managedBy, LabelTrigger: tr.Name, LabelFunction: tr.Spec.FunctionRef.Name}
}

func triggerMeta(tr *v1.Trigger, name string) metav1.ObjectMeta {
	return ownedMeta(tr, "Trigger", name, TriggerLabels(tr))
}

// clusterOf is what tr's kind has the operator run (nothing for a kind the registry does
// not know: the CRD's enum admits only registered ones).
func clusterOf(tr *v1.Trigger) kind.Cluster {
	if k, ok := triggers.Lookup(string(tr.Spec.Type)); ok {
		return k.Cluster(tr.Spec)
	}
	return kind.Cluster{}
}

// triggerContainer is the dispatcher container of tr's kind for fn.
func triggerContainer(tr *v1.Trigger, fn *v1.Function, opts Options, plan kind.Cluster) corev1.Container {
	c := dispatcherContainer(tr.Name, fn, opts, plan.Args...)
	c.Args = append(c.Args, plan.Flags...)
	env := make([]corev1.EnvVar, 0, len(plan.Env)+len(c.Env))
	for _, e := range plan.Env {
		env = append(env, corev1.EnvVar{Name: e.Name, ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: e.Secret}, Key: e.Key},
		}})
	}
	c.Env = append(env, c.Env...)
	return c
}

// invocationTimeout is how long the dispatcher waits for one invocation: the function's
// timeout plus a margin, or effectively unbounded when the function has none.
func invocationTimeout(fn *v1.Function) time.Duration {
	if d := rules.InvocationDeadline(fn.Spec.TimeoutSeconds); d > 0 {
		return d
	}
	return noLimit
}

// dispatcherContainer runs `sless dispatcher` for trigger (its name in the history) against
// fn through the interceptor, so a function at zero is woken by KEDA like any HTTP caller
// would wake it.
func dispatcherContainer(trigger string, fn *v1.Function, opts Options, args ...string) corev1.Container {
	args = append(args,
		"--function="+fn.Namespace+"/"+fn.Name,
		"--trigger="+trigger,
		"--target-url="+opts.InterceptorURL,
		"--timeout="+invocationTimeout(fn).String(),
		"--memory-mb="+strconv.Itoa(int(memoryMB(&fn.Spec.CodeSpec))),
	)
	args = append(args, targetArgs(fn, opts)...)
	args = append(args, maskFlag(fn)...)
	c := corev1.Container{
		Name:  "dispatcher",
		Image: opts.SlessImage,
		Args:  args,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi"), corev1.ResourceCPU: resource.MustParse("20m")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To(int64(65532)),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		// It signs its calls with the function's key (a dispatcher in the platform namespace
		// derives it from the master instead: MakeAsyncScaledJob).
		Env: []corev1.EnvVar{identityKeyEnv(fn.Name)},
	}
	if opts.HistorySecret != "" {
		c.Env = append(c.Env, corev1.EnvVar{Name: "SLESS_DATABASE_URL", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: opts.HistorySecret}, Key: "url", Optional: ptr.To(true),
			},
		}})
	}
	return c
}

// targetArgs point a dispatcher at fn's revisions by its resolved traffic (--target <revision
// host>=<percent>), picked per call as the gateway picks: a change of traffic re-renders the
// dispatcher. A function without a ready revision yet is addressed by its own host, which
// nothing serves until one is (the call fails and is retried like any failed call).
func targetArgs(fn *v1.Function, opts Options) []string {
	var args []string
	for _, t := range fn.Status.Traffic {
		if t.Revision != "" && t.Percent > 0 {
			args = append(args, "--target="+rules.RevisionHost(fn.Namespace, t.Revision, opts.Domain)+"="+strconv.Itoa(int(t.Percent)))
		}
	}
	if len(args) == 0 {
		return []string{"--target-host=" + rules.RoutingHost(fn.Namespace, fn.Name, opts.Domain)}
	}
	return args
}

// dispatcherPod runs c for fn. A dispatcher of a function that references secrets reads them
// as serviceAccount (MakeSecretReaderRole); any other gets no API credentials.
func dispatcherPod(c corev1.Container, fn *v1.Function, serviceAccount string) corev1.PodTemplateSpec {
	pod := corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers:                   []corev1.Container{c},
		RestartPolicy:                corev1.RestartPolicyNever,
		AutomountServiceAccountToken: ptr.To(false),
		EnableServiceLinks:           ptr.To(false),
	}}
	if len(fn.Spec.SecretNames()) > 0 {
		pod.Spec.ServiceAccountName, pod.Spec.AutomountServiceAccountToken = serviceAccount, ptr.To(true)
	}
	return pod
}

// drainingScaledJob is a ScaledJob whose scaler sc, authenticated by the
// TriggerAuthentication auth, starts Jobs of pod: at most sc.MaxJobs at once.
func drainingScaledJob(meta metav1.ObjectMeta, pod corev1.PodTemplateSpec, sc kind.Scaler, auth string) *kedav1alpha1.ScaledJob {
	return &kedav1alpha1.ScaledJob{
		ObjectMeta: meta,
		Spec: kedav1alpha1.ScaledJobSpec{
			JobTargetRef: &batchv1.JobSpec{
				BackoffLimit: ptr.To(int32(2)),
				Template:     pod,
			},
			PollingInterval:            ptr.To(int32(5)),
			SuccessfulJobsHistoryLimit: ptr.To(int32(3)),
			FailedJobsHistoryLimit:     ptr.To(int32(5)),
			MaxReplicaCount:            ptr.To(sc.MaxJobs),
			Triggers: []kedav1alpha1.ScaleTriggers{{
				Type:              sc.Type,
				Metadata:          sc.Metadata,
				AuthenticationRef: &kedav1alpha1.AuthenticationRef{Name: auth},
			}},
		},
	}
}

// TriggerAuthenticationName names the KEDA TriggerAuthentication of a trigger with a scaler.
func TriggerAuthenticationName(tr *v1.Trigger) string { return ScaledJobName(tr.Name) }

// MakeTriggerAuthentication lets the scaler of tr's kind read its parameters from the
// trigger's secrets (an event trigger's broker URL) without them ever appearing in the
// ScaledJob.
func MakeTriggerAuthentication(tr *v1.Trigger) *kedav1alpha1.TriggerAuthentication {
	var refs []kedav1alpha1.AuthSecretTargetRef
	if sc := clusterOf(tr).Scaler; sc != nil {
		for _, a := range sc.Auth {
			refs = append(refs, kedav1alpha1.AuthSecretTargetRef{Parameter: a.Parameter, Name: a.Secret, Key: a.Key})
		}
	}
	return &kedav1alpha1.TriggerAuthentication{
		ObjectMeta: triggerMeta(tr, TriggerAuthenticationName(tr)),
		Spec:       kedav1alpha1.TriggerAuthenticationSpec{SecretTargetRef: refs},
	}
}

// MakeScaledJob renders the KEDA ScaledJob of a trigger whose kind has a scaler (an event
// trigger's rabbitmq scaler): it starts dispatcher Jobs while there is work; each works until
// there is none. enabled=false pauses it in place.
func MakeScaledJob(tr *v1.Trigger, fn *v1.Function, opts Options) *kedav1alpha1.ScaledJob {
	plan := clusterOf(tr)
	c := triggerContainer(tr, fn, opts, plan)
	sj := drainingScaledJob(triggerMeta(tr, ScaledJobName(tr.Name)), dispatcherPod(c, fn, SecretReaderName(fn)), *plan.Scaler, TriggerAuthenticationName(tr))
	if !tr.Spec.IsEnabled() {
		sj.Annotations = map[string]string{AnnotationPaused: "true"}
	}
	return sj
}

// MakeCronJob renders the CronJob of a trigger whose kind fires on a schedule (a cron
// trigger): exact ticks, each running the kind's dispatcher through the interceptor.
// enabled=false suspends it in place.
func MakeCronJob(tr *v1.Trigger, fn *v1.Function, opts Options) *batchv1.CronJob {
	plan := clusterOf(tr)
	sc := plan.Schedule
	cj := &batchv1.CronJob{
		ObjectMeta: triggerMeta(tr, CronJobName(tr.Name)),
		Spec: batchv1.CronJobSpec{
			Schedule:                   sc.Cron,
			ConcurrencyPolicy:          batchv1.ConcurrencyPolicy(sc.ConcurrencyPolicy),
			StartingDeadlineSeconds:    ptr.To(sc.StartingDeadlineSeconds),
			Suspend:                    ptr.To(!tr.Spec.IsEnabled()),
			SuccessfulJobsHistoryLimit: ptr.To(int32(3)),
			FailedJobsHistoryLimit:     ptr.To(int32(3)),
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: TriggerLabels(tr)},
				Spec: batchv1.JobSpec{
					// The dispatcher retries by itself; a pod-level retry would double-fire.
					BackoffLimit: ptr.To(int32(0)),
					Template:     dispatcherPod(triggerContainer(tr, fn, opts, plan), fn, SecretReaderName(fn)),
				},
			},
		},
	}
	if sc.TimeZone != "" {
		cj.Spec.TimeZone = ptr.To(sc.TimeZone)
	}
	return cj
}

// HTTPGate is the gate of a function's http triggers (triggers of kinds that are no route
// and those being deleted are passed over): whether its URL requires auth or is closed.
func HTTPGate(trs []v1.Trigger) rules.Gate {
	var http []rules.HTTPTrigger
	for i := range trs {
		t := &trs[i]
		if k, ok := triggers.Lookup(string(t.Spec.Type)); ok && k.Routes() && t.DeletionTimestamp.IsZero() {
			http = append(http, rules.HTTPTrigger{Enabled: t.Spec.IsEnabled(), RequireAuth: t.Spec.RequireAuth})
		}
	}
	return rules.HTTPGate(http)
}
