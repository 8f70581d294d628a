package scaling

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"sless.dev/sless/rules"
)

// A tenant namespace's pods that run the tenant's code — a function's (labelled
// LabelFunction) and a job run's (LabelJob) — are isolated by NetworkPolicies, where the
// cluster's CNI enforces them (docs/install.md): a function's pods take connections only
// from the KEDA HTTP interceptor (the gateway, the dispatchers and pre-warms all reach them
// through it), a job run's from nothing; both reach DNS, the public internet and what the
// operator allows, never the platform's namespace, the API server, link-local metadata
// addresses or another tenant's pods. The dispatchers of the namespace (platform code, no
// such label) are left out: they reach the broker, the database and the API server. Signed
// calls (rules.SignRequest) hold where no CNI enforces these.

// Names of the tenant NetworkPolicies: one per namespace each, kept for the namespace's life.
const (
	FunctionsNetworkPolicy = "sless-functions"
	JobsNetworkPolicy      = "sless-jobs"
)

// NetworkOptions are what the tenants' NetworkPolicies admit.
type NetworkOptions struct {
	// Enabled renders them (a cluster whose own policies isolate tenants may turn it off).
	Enabled bool
	// InterceptorNamespace and InterceptorPods (a label selector's labels) select the KEDA
	// HTTP interceptor's pods, the only ones a function's pods take connections from.
	InterceptorNamespace string
	InterceptorPods      map[string]string
	// EgressAllow are destinations the tenants' code may reach besides DNS and the public
	// internet: an internal service, a NodeLocal DNSCache, a private API.
	EgressAllow []EgressRule
	// APIServer are the addresses the API server is reached on (its EndpointSlice): a
	// public one is taken out of the internet the tenants' code reaches, as the private
	// ranges are.
	APIServer []netip.Addr
}

// DefaultNetworkOptions admit the interceptor as the add-on's Helm chart installs it
// (docs/install.md): namespace keda, pods labelled app.kubernetes.io/component=interceptor.
func DefaultNetworkOptions() NetworkOptions {
	return NetworkOptions{Enabled: true, InterceptorNamespace: "keda",
		InterceptorPods: map[string]string{"app.kubernetes.io/component": "interceptor"}}
}

func (o NetworkOptions) validate() error {
	if o.Enabled && (o.InterceptorNamespace == "" || len(o.InterceptorPods) == 0) {
		return errors.New("scaling options: the interceptor's namespace and pod labels are required for the tenants' NetworkPolicies (or turn them off)")
	}
	return nil
}

// EgressRule is a destination the tenants' code may reach: a CIDR, and a port and protocol
// when Port is not 0.
type EgressRule struct {
	CIDR     netip.Prefix
	Port     int32
	Protocol corev1.Protocol
}

// ParseEgressRule reads CIDR[:PORT[/PROTOCOL]] (10.0.0.0/8, 10.1.2.3/32:5432,
// 169.254.20.10/32:53/UDP, fd00::/8:443); the protocol is TCP unless given.
func ParseEgressRule(s string) (EgressRule, error) {
	bad := func(why string) (EgressRule, error) {
		return EgressRule{}, fmt.Errorf("%q: %s; want CIDR[:PORT[/PROTOCOL]], e.g. 10.1.2.3/32:5432 or 169.254.20.10/32:53/UDP", s, why)
	}
	slash := strings.IndexByte(s, '/')
	if slash < 0 {
		return bad("no prefix length")
	}
	cidr, rest, hasPort := strings.Cut(s[slash:], ":")
	prefix, err := netip.ParsePrefix(s[:slash] + cidr)
	if err != nil {
		return bad(err.Error())
	}
	r := EgressRule{CIDR: prefix.Masked()}
	if !hasPort {
		return r, nil
	}
	port, proto, hasProto := strings.Cut(rest, "/")
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil || n < 1 || n > 65535 {
		return bad("the port is not 1-65535")
	}
	r.Port, r.Protocol = int32(n), corev1.ProtocolTCP
	if hasProto {
		r.Protocol = corev1.Protocol(strings.ToUpper(proto))
		if !slices.Contains([]corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}, r.Protocol) {
			return bad("the protocol is not TCP, UDP or SCTP")
		}
	}
	return r, nil
}

// MakeTenantNetworkPolicies renders the NetworkPolicies of tenant namespace ns (none when
// opts.Network turns them off): sless-functions for function pods, sless-jobs for job runs.
func MakeTenantNetworkPolicies(ns string, opts Options) []*networkingv1.NetworkPolicy {
	o := opts.Network
	if !o.Enabled {
		return nil
	}
	egress := tenantEgress(o)
	policy := func(name, label string, ingress []networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{LabelManagedBy: managedBy}},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelManagedBy: managedBy},
					MatchExpressions: []metav1.LabelSelectorRequirement{{Key: label, Operator: metav1.LabelSelectorOpExists}}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
				Ingress:     ingress, // none: nothing may connect
				Egress:      egress,
			},
		}
	}
	fromInterceptor := []networkingv1.NetworkPolicyIngressRule{{
		From: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: o.InterceptorNamespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: o.InterceptorPods},
		}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(port))}},
	}}
	return []*networkingv1.NetworkPolicy{
		policy(FunctionsNetworkPolicy, LabelFunction, fromInterceptor),
		policy(JobsNetworkPolicy, LabelJob, nil),
	}
}

// tenantEgress is where the tenants' code may connect: DNS (port 53 anywhere: kube-dns, a
// node-local cache, a resolver outside), every public address but the API server's, and
// the operator's allow-list. Another tenant's and the platform's pods are on cluster
// networks (private or CGNAT), so left out; selectors admit none of them.
func tenantEgress(o NetworkOptions) []networkingv1.NetworkPolicyEgressRule {
	var v4, v6 []string
	for _, p := range rules.NonPublicPrefixes() {
		if p.Addr().Is4() {
			v4 = append(v4, p.String())
		} else {
			v6 = append(v6, p.String())
		}
	}
	for _, a := range o.APIServer {
		if a = a.Unmap(); rules.PublicAddress(a) {
			if a.Is4() {
				v4 = append(v4, netip.PrefixFrom(a, 32).String())
			} else {
				v6 = append(v6, netip.PrefixFrom(a, 128).String())
			}
		}
	}
	dns := func(p corev1.Protocol) networkingv1.NetworkPolicyPort {
		return networkingv1.NetworkPolicyPort{Protocol: ptr.To(p), Port: ptr.To(intstr.FromInt32(53))}
	}
	out := []networkingv1.NetworkPolicyEgressRule{
		{Ports: []networkingv1.NetworkPolicyPort{dns(corev1.ProtocolUDP), dns(corev1.ProtocolTCP)}},
		{To: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: v4}},
			{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: v6}},
		}},
	}
	for _, a := range o.EgressAllow {
		r := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: a.CIDR.String()}}}}
		if a.Port != 0 {
			r.Ports = []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(a.Protocol), Port: ptr.To(intstr.FromInt32(a.Port))}}
		}
		out = append(out, r)
	}
	return out
}
