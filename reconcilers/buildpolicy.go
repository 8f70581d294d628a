package reconcilers

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"sless.dev/sless/rules"
	"sless.dev/sless/scaling"
)

// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list

// ensurePolicy applies the build pods' NetworkPolicy (scaling.MakeBuildNetworkPolicy) with
// what it must reach looked up now: the registry's, the mirrors' and the artifact store's
// Services may have moved since the last build.
func (b builds) ensurePolicy(ctx context.Context) error {
	reach, err := b.reach(ctx)
	if err != nil {
		return err
	}
	return ensure(ctx, b.kids, nil, scaling.MakeBuildNetworkPolicy(b.opts.Build, reach), &networkingv1.NetworkPolicy{}, nil)
}

// reach finds where a build's steps connect — the registry (push, base images), the mirrors
// (base images) and the artifact store (the build context) — and the API server's public
// addresses, which no egress range may reach.
func (b builds) reach(ctx context.Context) (scaling.BuildReach, error) {
	var r scaling.BuildReach
	var hosts []string
	for _, reg := range append([]string{b.opts.Build.Registry}, b.opts.Build.RegistryMirrors...) {
		host, _, _ := strings.Cut(reg, "/")
		port := "443"
		if slices.Contains(b.opts.Build.InsecureRegistries, host) {
			port = "80"
		}
		hosts = append(hosts, withPort(host, port))
	}
	if u, err := url.Parse(b.opts.Build.S3Endpoint); err == nil && u.Host != "" {
		hosts = append(hosts, withPort(u.Host, map[bool]string{true: "443", false: "80"}[u.Scheme == "https"]))
	}
	for _, hp := range hosts {
		e, err := b.endpoint(ctx, hp)
		if err != nil {
			return r, err
		}
		if e != nil {
			r.Endpoints = append(r.Endpoints, *e)
		}
	}
	api, err := b.endpointSlices(ctx, metav1.NamespaceDefault, "kubernetes")
	if err != nil {
		return r, err
	}
	for _, p := range addresses(api) {
		if rules.PublicAddress(p.Addr()) { // the others are left out of every range already
			r.Never = append(r.Never, p)
		}
	}
	return r, nil
}

// withPort is host with def as its port unless it names one.
func withPort(host, def string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), def)
}

// endpoint is where hostPort leads: an address as itself; a Service's name
// (<svc>.<ns>[.svc[.<cluster domain>]], as pods resolve it) as the Service's pods, or the
// addresses of its EndpointSlices when it has no selector; nil for any other name (reached
// only through the egress ranges: public addresses by default) and for a Service that does
// not exist.
func (b builds) endpoint(ctx context.Context, hostPort string) (*scaling.BuildEndpoint, error) {
	host, p, err := net.SplitHostPort(hostPort)
	if err != nil {
		return nil, nil
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return &scaling.BuildEndpoint{Prefixes: []netip.Prefix{netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen())},
			Ports: []intstr.IntOrString{intstr.FromInt(port)}}, nil
	}
	labels := strings.Split(host, ".")
	if len(labels) < 2 || (len(labels) > 2 && labels[2] != "svc") {
		return nil, nil
	}
	var svc corev1.Service
	err = b.reader.Get(ctx, client.ObjectKey{Namespace: labels[1], Name: labels[0]}, &svc)
	if apierrors.IsNotFound(err) {
		log.FromContext(ctx).Info("no Service for a build endpoint: builds reach it only through --build-egress", "host", host)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Service %s/%s, a build endpoint: %w", labels[1], labels[0], err)
	}
	i := slices.IndexFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return int(sp.Port) == port })
	if i < 0 || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil, nil
	}
	sp := svc.Spec.Ports[i]
	if len(svc.Spec.Selector) > 0 {
		target := sp.TargetPort
		if target.IntValue() == 0 && target.StrVal == "" {
			target = intstr.FromInt(port)
		}
		return &scaling.BuildEndpoint{Namespace: svc.Namespace, Selector: svc.Spec.Selector, Ports: []intstr.IntOrString{target}}, nil
	}
	// Without a selector the Service's EndpointSlices say where it leads, and on which port.
	list, err := b.endpointSlices(ctx, svc.Namespace, svc.Name)
	if err != nil {
		return nil, err
	}
	e := &scaling.BuildEndpoint{Prefixes: addresses(list)}
	for _, s := range list {
		for _, p := range s.Ports {
			if ptr.Deref(p.Name, "") == sp.Name && p.Port != nil && !slices.Contains(e.Ports, intstr.FromInt32(*p.Port)) {
				e.Ports = append(e.Ports, intstr.FromInt32(*p.Port))
			}
		}
	}
	if len(e.Prefixes) == 0 || len(e.Ports) == 0 {
		return nil, nil
	}
	return e, nil
}

// endpointSlices are the EndpointSlices of Service ns/name.
func (b builds) endpointSlices(ctx context.Context, ns, name string) ([]discoveryv1.EndpointSlice, error) {
	var list discoveryv1.EndpointSliceList
	if err := b.reader.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return nil, fmt.Errorf("listing the endpoints of Service %s/%s: %w", ns, name, err)
	}
	return list.Items, nil
}

// addresses are the endpoint addresses of slices, each as a prefix of itself alone.
func addresses(list []discoveryv1.EndpointSlice) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range list {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
				}
			}
		}
	}
	return out
}
