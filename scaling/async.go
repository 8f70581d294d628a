package scaling

import (
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
	"sless.dev/sless/triggers/rabbitmq"
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
		rabbitmq.DrainArgs(queue, rules.AsyncDeadLetterQueue(fn.Namespace, fn.Name, a.DeadLetterQueue), a.Retry, "--async")...)
	c.Env = []corev1.EnvVar{
		{Name: "SLESS_AMQP_URL", ValueFrom: asyncSecretKey(opts, "SLESS_AMQP_URL")},
		{Name: "SLESS_DATABASE_URL", ValueFrom: asyncSecretKey(opts, "SLESS_DATABASE_URL")},
		identityMasterEnv(opts),
	}
	return drainingScaledJob(asyncMeta(fn, opts), dispatcherPod(c, fn, DispatcherServiceAccount), rabbitmq.Scaler(queue, 20, max(a.MaxJobs, 1)), AsyncName(fn.Namespace, fn.Name))
}
