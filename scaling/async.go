package scaling

import (
	"strconv"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
)

// A function's asynchronous invocations wait in rules.AsyncQueue on the platform's broker.
// Their dispatcher runs in the platform namespace, like builds, so the broker and database
// credentials never enter a tenant's namespace; owner references cannot cross namespaces,
// so the function's finalizer removes these objects.

// AsyncLabels find the asynchronous dispatcher objects of a function.
func AsyncLabels(fn *v1.Function) map[string]string {
	return map[string]string{LabelManagedBy: managedBy, LabelFunctionNamespace: fn.Namespace, LabelFunction: fn.Name}
}

func asyncMeta(fn *v1.Function, opts Options) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: AsyncName(fn.Namespace, fn.Name), Namespace: opts.Build.Namespace, Labels: AsyncLabels(fn)}
}

// asyncSecretKey selects one key of Options.AsyncSecret.
func asyncSecretKey(opts Options, key string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: opts.AsyncSecret}, Key: key}}
}

// MakeAsyncTriggerAuthentication lets KEDA's rabbitmq scaler read the platform broker's URL.
func MakeAsyncTriggerAuthentication(fn *v1.Function, opts Options) *kedav1alpha1.TriggerAuthentication {
	return &kedav1alpha1.TriggerAuthentication{
		ObjectMeta: asyncMeta(fn, opts),
		Spec: kedav1alpha1.TriggerAuthenticationSpec{
			SecretTargetRef: []kedav1alpha1.AuthSecretTargetRef{{Parameter: "host", Name: opts.AsyncSecret, Key: "SLESS_AMQP_URL"}},
		},
	}
}

// MakeAsyncScaledJob renders the ScaledJob draining fn's asynchronous invocations: dispatcher
// Jobs (`sless dispatcher --async`) while calls wait, each replaying callers' requests through
// the interceptor with the function's retry policy, then the dead-letter queue.
func MakeAsyncScaledJob(fn *v1.Function, opts Options) *kedav1alpha1.ScaledJob {
	a := fn.Spec.Async
	queue := rules.AsyncQueue(fn.Namespace, fn.Name)
	c := dispatcherContainer("", fn, opts,
		"dispatcher", "--async",
		"--queue="+queue,
		"--dead-letter-queue="+rules.AsyncDeadLetterQueue(fn.Namespace, fn.Name, a.DeadLetterQueue),
		"--max-attempts="+strconv.Itoa(int(a.Retry.MaxAttempts)),
		"--backoff="+(time.Duration(a.Retry.BackoffMillis)*time.Millisecond).String(),
		"--exit-when-empty",
	)
	c.Env = []corev1.EnvVar{
		{Name: "SLESS_AMQP_URL", ValueFrom: asyncSecretKey(opts, "SLESS_AMQP_URL")},
		{Name: "SLESS_DATABASE_URL", ValueFrom: asyncSecretKey(opts, "SLESS_DATABASE_URL")},
	}
	return &kedav1alpha1.ScaledJob{
		ObjectMeta: asyncMeta(fn, opts),
		Spec: kedav1alpha1.ScaledJobSpec{
			JobTargetRef: &batchv1.JobSpec{
				BackoffLimit: ptr.To(int32(2)),
				Template:     dispatcherPod(c),
			},
			PollingInterval:            ptr.To(int32(5)),
			SuccessfulJobsHistoryLimit: ptr.To(int32(3)),
			FailedJobsHistoryLimit:     ptr.To(int32(5)),
			MaxReplicaCount:            ptr.To(max(a.MaxJobs, 1)),
			Triggers: []kedav1alpha1.ScaleTriggers{{
				Type:              "rabbitmq",
				Metadata:          map[string]string{"queueName": queue, "mode": "QueueLength", "value": "20", "protocol": "amqp"},
				AuthenticationRef: &kedav1alpha1.AuthenticationRef{Name: AsyncName(fn.Namespace, fn.Name)},
			}},
		},
	}
}
