package scaling

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/utils/ptr"

	v1 "sless.dev/sless/apis/v1alpha1"
)

// A function's dispatchers mask the values of the secrets it references in what they record
// (an async result, an error in the history): they read those secrets, and only those,
// through the API. The Role below grants get on exactly the referenced names to the
// function's own ServiceAccount (its trigger dispatchers, in its namespace) and to the
// platform's DispatcherServiceAccount (its asynchronous dispatcher, in the platform
// namespace). Function pods never get either: they run with no API credentials.

// DispatcherServiceAccount is the platform namespace's ServiceAccount of asynchronous
// dispatcher pods (the Helm chart creates it, with no permission of its own).
const DispatcherServiceAccount = "sless-dispatcher"

// SecretReaderName names the ServiceAccount, Role and RoleBinding through which fn's
// dispatchers read the secrets fn references.
func SecretReaderName(fn *v1.Function) string { return "sless-secrets-" + fn.Name }

// MakeSecretReaderServiceAccount is the identity of fn's trigger dispatcher pods.
func MakeSecretReaderServiceAccount(fn *v1.Function) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		ObjectMeta:                   functionMeta(fn, SecretReaderName(fn)),
		AutomountServiceAccountToken: ptr.To(false), // the dispatcher pods ask for the token
	}
}

// MakeSecretReaderRole may get the secrets fn references, by name; nil when it references none.
func MakeSecretReaderRole(fn *v1.Function) *rbacv1.Role {
	names := fn.Spec.SecretNames()
	if len(names) == 0 {
		return nil
	}
	return &rbacv1.Role{
		ObjectMeta: functionMeta(fn, SecretReaderName(fn)),
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: names}},
	}
}

// MakeSecretReaderRoleBinding grants MakeSecretReaderRole to fn's dispatchers in both
// namespaces.
func MakeSecretReaderRoleBinding(fn *v1.Function, opts Options) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: functionMeta(fn, SecretReaderName(fn)),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: SecretReaderName(fn)},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.ServiceAccountKind, Namespace: fn.Namespace, Name: SecretReaderName(fn)},
			{Kind: rbacv1.ServiceAccountKind, Namespace: opts.Build.Namespace, Name: DispatcherServiceAccount},
		},
	}
}

// maskFlag tells `sless dispatcher` which secrets of the function's namespace to mask.
func maskFlag(fn *v1.Function) []string {
	if names := fn.Spec.SecretNames(); len(names) > 0 {
		return []string{"--mask-secrets=" + strings.Join(names, ",")}
	}
	return nil
}
