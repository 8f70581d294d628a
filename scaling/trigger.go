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
)

// TriggerLabels select a trigger's children.
func TriggerLabels(tr *v1.Trigger) map[string]string {
	return map[string]string{LabelManagedBy: managedBy, LabelTrigger: tr.Name, LabelFunction: tr.Spec.FunctionRef.Name}
}

func triggerMeta(tr *v1.Trigger, name string) metav1.ObjectMeta {
	return ownedMeta(tr, "Trigger", name, TriggerLabels(tr))
}

// DeadLetterQueue is where an event trigger's exhausted messages go.
func DeadLetterQueue(e *v1.EventSpec) string {
	if e.DeadLetterQueue != "" {
		return e.DeadLetterQueue
	}
	return e.Queue + ".dlq"
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

// drainArgs make `sless dispatcher` (with flags) consume queue until it is empty, retrying
// as retry says and moving exhausted messages to dlq.
func drainArgs(queue, dlq string, retry v1.RetryPolicy, flags ...string) []string {
	return append(append([]string{"dispatcher"}, flags...),
		"--queue="+queue,
		"--dead-letter-queue="+dlq,
		"--max-attempts="+strconv.Itoa(int(retry.MaxAttempts)),
		"--backoff="+(time.Duration(retry.BackoffMillis)*time.Millisecond).String(),
		"--exit-when-empty",
	)
}

// drainingScaledJob is a ScaledJob whose rabbitmq scaler, authenticated by the
// TriggerAuthentication auth, starts Jobs of pod while messages wait in queue: one per
// queueLength waiting, at most maxJobs at once.
func drainingScaledJob(meta metav1.ObjectMeta, pod corev1.PodTemplateSpec, queue string, queueLength, maxJobs int32, auth string) *kedav1alpha1.ScaledJob {
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
			MaxReplicaCount:            ptr.To(maxJobs),
			Triggers: []kedav1alpha1.ScaleTriggers{{
				Type: "rabbitmq",
				Metadata: map[string]string{
					"queueName": queue,
					"mode":      "QueueLength",
					"value":     strconv.Itoa(int(queueLength)),
					"protocol":  "amqp",
				},
				AuthenticationRef: &kedav1alpha1.AuthenticationRef{Name: auth},
			}},
		},
	}
}

// TriggerAuthenticationName names the KEDA TriggerAuthentication of an event trigger.
func TriggerAuthenticationName(tr *v1.Trigger) string { return ScaledJobName(tr.Name) }

// MakeTriggerAuthentication lets KEDA's rabbitmq scaler read the broker URL from the
// trigger's Secret without the URL ever appearing in the ScaledJob.
func MakeTriggerAuthentication(tr *v1.Trigger) *kedav1alpha1.TriggerAuthentication {
	ref := tr.Spec.Event.BrokerSecretRef
	return &kedav1alpha1.TriggerAuthentication{
		ObjectMeta: triggerMeta(tr, TriggerAuthenticationName(tr)),
		Spec: kedav1alpha1.TriggerAuthenticationSpec{
			SecretTargetRef: []kedav1alpha1.AuthSecretTargetRef{{Parameter: "host", Name: ref.Name, Key: BrokerSecretKey(ref)}},
		},
	}
}

// BrokerSecretKey is the key of an event trigger's broker secret that holds the URL.
func BrokerSecretKey(ref v1.SecretKeyReference) string {
	if ref.Key != "" {
		return ref.Key
	}
	return "host"
}

// MakeScaledJob renders the KEDA ScaledJob of an event trigger: the rabbitmq scaler starts
// dispatcher Jobs while messages wait; each consumes until the queue is drained.
// enabled=false pauses it in place.
func MakeScaledJob(tr *v1.Trigger, fn *v1.Function, opts Options) *kedav1alpha1.ScaledJob {
	e := tr.Spec.Event
	c := dispatcherContainer(tr.Name, fn, opts, drainArgs(e.Queue, DeadLetterQueue(e), e.Retry)...)
	ref := e.BrokerSecretRef
	c.Env = append([]corev1.EnvVar{{Name: "SLESS_AMQP_URL", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: BrokerSecretKey(ref)},
	}}}, c.Env...)
	sj := drainingScaledJob(triggerMeta(tr, ScaledJobName(tr.Name)), dispatcherPod(c, fn, SecretReaderName(fn)), e.Queue, e.QueueLength, e.MaxJobs, TriggerAuthenticationName(tr))
	if !tr.Spec.IsEnabled() {
		sj.Annotations = map[string]string{AnnotationPaused: "true"}
	}
	return sj
}

// MakeCronJob renders the CronJob of a cron trigger: exact ticks (KEDA's cron scaler is
// window-based), each running `sless dispatcher fire` through the interceptor.
// enabled=false suspends it in place.
func MakeCronJob(tr *v1.Trigger, fn *v1.Function, opts Options) *batchv1.CronJob {
	cr := tr.Spec.Cron
	c := dispatcherContainer(tr.Name, fn, opts, "dispatcher", "fire", "--schedule="+cr.Schedule)
	if cr.Timezone != "" {
		c.Args = append(c.Args, "--timezone="+cr.Timezone)
	}
	cj := &batchv1.CronJob{
		ObjectMeta: triggerMeta(tr, CronJobName(tr.Name)),
		Spec: batchv1.CronJobSpec{
			Schedule:                   cr.Schedule,
			ConcurrencyPolicy:          batchv1.ConcurrencyPolicy(cr.ConcurrencyPolicy),
			StartingDeadlineSeconds:    ptr.To(cr.StartingDeadlineSeconds),
			Suspend:                    ptr.To(!tr.Spec.IsEnabled()),
			SuccessfulJobsHistoryLimit: ptr.To(int32(3)),
			FailedJobsHistoryLimit:     ptr.To(int32(3)),
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: TriggerLabels(tr)},
				Spec: batchv1.JobSpec{
					// The dispatcher retries by itself; a pod-level retry would double-fire.
					BackoffLimit: ptr.To(int32(0)),
					Template:     dispatcherPod(c, fn, SecretReaderName(fn)),
				},
			},
		},
	}
	if cr.Timezone != "" {
		cj.Spec.TimeZone = ptr.To(cr.Timezone)
	}
	return cj
}

// HTTPGate is the gate of a function's http triggers (triggers of other types and those
// being deleted are passed over): whether its URL requires auth or is closed.
func HTTPGate(triggers []v1.Trigger) rules.Gate {
	var http []rules.HTTPTrigger
	for i := range triggers {
		t := &triggers[i]
		if t.Spec.Type == v1.TriggerHTTP && t.DeletionTimestamp.IsZero() {
			http = append(http, rules.HTTPTrigger{Enabled: t.Spec.IsEnabled(), RequireAuth: t.Spec.RequireAuth})
		}
	}
	return rules.HTTPGate(http)
}
