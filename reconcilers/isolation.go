package reconcilers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/scaling"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;update;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list

// reconcileIsolation writes what keeps fn apart from other tenants: its identity Secret
// (the key its calls are signed with, read by its pods and dispatchers; it goes with the
// function) and its namespace's NetworkPolicies. Both come before any pod that needs them.
func (r *FunctionReconciler) reconcileIsolation(ctx context.Context, fn *v1.Function) error {
	if err := ensure(ctx, r.children, fn, scaling.MakeIdentitySecret(fn, r.Options), &corev1.Secret{}, nil); err != nil {
		return err
	}
	return ensureNetworkPolicies(ctx, r.children, fn.Namespace, r.Options)
}

// ensureNetworkPolicies applies tenant namespace ns's NetworkPolicies. They belong to no
// object: the namespace's first Function or FunctionJob creates them, every reconcile of
// one keeps them as rendered (an apply only when they differ), and they stay for the
// namespace's life — a namespace without functions runs no pod they would select.
func ensureNetworkPolicies(ctx context.Context, c *children, ns string, opts scaling.Options) error {
	for _, p := range scaling.MakeTenantNetworkPolicies(ns, opts) {
		if err := ensure(ctx, c, nil, p, &networkingv1.NetworkPolicy{}, nil); err != nil {
			return err
		}
	}
	return nil
}
