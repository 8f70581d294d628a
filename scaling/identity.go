package scaling

import (
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/rules"
)

// A function's key (rules.FunctionKey) signs every call the platform makes to it; its pods
// and its dispatchers in its namespace read it from a Secret of its own there, by
// secretKeyRef: the key is in no pod spec, status or Event. The asynchronous dispatchers, in
// the platform namespace, derive it from the master (Options.IdentitySecret).

// identityKeyField is the key of the identity Secrets (a function's key, hex) and
// IdentityMasterField that of the platform's master Secret (hex).
const (
	identityKeyField    = "key"
	IdentityMasterField = "master"
)

// AnnotationIdentity on a function's pod template is the master key's fingerprint: a new
// master (rotation) rolls the pods onto their new keys.
const AnnotationIdentity = "sless.dev/identity-key"

// IdentitySecretName names function fn's identity Secret. The dot keeps it out of the
// secrets API's names (DNS labels), so a tenant can neither take nor reference it.
func IdentitySecretName(fn string) string { return "sless-identity." + fn }

// MakeIdentitySecret renders the Secret holding fn's key, controlled by fn: it goes with
// the function.
func MakeIdentitySecret(fn *v1.Function, opts Options) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: functionMeta(fn, IdentitySecretName(fn.Name)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{identityKeyField: []byte(hex.EncodeToString(rules.FunctionKey(opts.IdentityMaster, fn.Namespace, fn.Name)))},
	}
}

// identityKeyEnv hands function fn's key to a container of its namespace.
func identityKeyEnv(fn string) corev1.EnvVar {
	return corev1.EnvVar{Name: rules.EnvIdentityKey, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: IdentitySecretName(fn)}, Key: identityKeyField}}}
}

// identityMasterEnv hands the master to a dispatcher of the platform namespace, which
// derives the key of the function it calls (`sless dispatcher --identity-master`).
func identityMasterEnv(opts Options) corev1.EnvVar {
	return corev1.EnvVar{Name: "SLESS_IDENTITY_MASTER", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: opts.IdentitySecret}, Key: IdentityMasterField}}}
}
