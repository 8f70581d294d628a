package scaling

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// egressAllows is what a NetworkPolicy implementation decides for a connection of a pod
// that p selects to addr:port over proto (ipBlocks and ports only: the tenant policies name
// no pod or namespace as a destination).
func egressAllows(p *networkingv1.NetworkPolicy, addr netip.Addr, port int32, proto corev1.Protocol) bool {
	for _, r := range p.Spec.Egress {
		portOK := len(r.Ports) == 0
		for _, pp := range r.Ports {
			portOK = portOK || (pp.Port == nil || pp.Port.IntVal == port) && (pp.Protocol == nil || *pp.Protocol == proto)
		}
		toOK := len(r.To) == 0
		for _, to := range r.To {
			if to.IPBlock == nil {
				continue
			}
			in := netip.MustParsePrefix(to.IPBlock.CIDR).Contains(addr)
			for _, e := range to.IPBlock.Except {
				in = in && !netip.MustParsePrefix(e).Contains(addr)
			}
			toOK = toOK || in
		}
		if portOK && toOK {
			return true
		}
	}
	return false
}

// TestTenantNetworkPolicies: a tenant's function pods take connections from the
// interceptor's pods only, its job runs from none; both reach DNS, the public internet and
// the operator's allow-list, and nothing else — the platform's and other tenants' pods and
// Services (cluster networks), the API server (a ClusterIP, its endpoints public or not),
// the cloud metadata addresses. Dispatcher pods (no function or job label) are not selected.
func TestTenantNetworkPolicies(t *testing.T) {
	opts := testOptions()
	opts.Network.APIServer = []netip.Addr{netip.MustParseAddr("34.120.1.2"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("2600:1900::7")}
	for _, s := range []string{"10.20.0.0/16:5432", "169.254.20.10/32:53/udp", "fd12::/64"} {
		r, err := ParseEgressRule(s)
		if err != nil {
			t.Fatal(err)
		}
		opts.Network.EgressAllow = append(opts.Network.EgressAllow, r)
	}
	policies := MakeTenantNetworkPolicies("sless-abc", opts)
	if len(policies) != 2 {
		t.Fatalf("%d policies, want sless-functions and sless-jobs", len(policies))
	}
	fnPolicy, jobPolicy := policies[0], policies[1]
	pods := map[string]labels.Set{
		"function":   {LabelManagedBy: "sless", LabelFunction: "hello", LabelRevision: "hello-1"},
		"job run":    {LabelManagedBy: "sless", LabelJob: "once"},
		"dispatcher": {"batch.kubernetes.io/job-name": "orders-events-x7"},
	}
	for name, p := range map[string]*networkingv1.NetworkPolicy{"functions": fnPolicy, "jobs": jobPolicy} {
		if p.Namespace != "sless-abc" || p.Labels[LabelManagedBy] != "sless" || len(p.Spec.PolicyTypes) != 2 {
			t.Errorf("%s: %s/%s labels %v types %v", name, p.Namespace, p.Name, p.Labels, p.Spec.PolicyTypes)
		}
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		for pod, l := range pods {
			if want := pod == map[string]string{"functions": "function", "jobs": "job run"}[name]; sel.Matches(l) != want {
				t.Errorf("%s selects the %s pod: %t, want %t", name, pod, !want, want)
			}
		}
		for _, c := range []struct {
			addr  string
			port  int32
			proto corev1.Protocol
			want  bool
		}{
			{"8.8.8.8", 443, corev1.ProtocolTCP, true},         // the internet
			{"2606:4700::1111", 443, corev1.ProtocolTCP, true}, // over IPv6
			{"10.96.0.10", 53, corev1.ProtocolUDP, true},       // kube-dns
			{"10.96.0.10", 53, corev1.ProtocolTCP, true},       // kube-dns, long answers
			{"169.254.20.10", 53, corev1.ProtocolUDP, true},    // allowed: a node-local DNS cache
			{"10.20.3.4", 5432, corev1.ProtocolTCP, true},      // allowed: a database
			{"fd12::9", 8443, corev1.ProtocolTCP, true},        // allowed, every port
			{"10.20.3.4", 22, corev1.ProtocolTCP, false},       // the allowed host, another port
			{"169.254.169.254", 80, corev1.ProtocolTCP, false}, // cloud metadata
			{"fd00:ec2::254", 80, corev1.ProtocolTCP, false},   // AWS metadata over IPv6
			{"10.96.0.1", 443, corev1.ProtocolTCP, false},      // the API server's ClusterIP
			{"34.120.1.2", 443, corev1.ProtocolTCP, false},     // the API server's public endpoint
			{"2600:1900::7", 443, corev1.ProtocolTCP, false},   // and its IPv6 one
			{"10.244.1.17", 8080, corev1.ProtocolTCP, false},   // another tenant's pod
			{"100.64.3.2", 8080, corev1.ProtocolTCP, false},    // a pod on a CGNAT pod network
			{"172.16.5.5", 8080, corev1.ProtocolTCP, false},    // the platform's pods
			{"192.168.1.1", 9000, corev1.ProtocolTCP, false},   // a node, MinIO, ...
			{"127.0.0.1", 10250, corev1.ProtocolTCP, false},    // loopback
			{"fe80::1", 80, corev1.ProtocolTCP, false},         // IPv6 link-local
			{"34.120.1.3", 443, corev1.ProtocolTCP, true},      // the API server's neighbour
			{"10.96.0.10", 5353, corev1.ProtocolUDP, false},    // not DNS
		} {
			if got := egressAllows(p, netip.MustParseAddr(c.addr), c.port, c.proto); got != c.want {
				t.Errorf("%s: egress to %s:%d/%s allowed %t, want %t", name, c.addr, c.port, c.proto, got, c.want)
			}
		}
	}
	in := fnPolicy.Spec.Ingress
	if len(in) != 1 || len(in[0].From) != 1 || len(in[0].Ports) != 1 || in[0].Ports[0].Port.IntVal != 8080 ||
		in[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "keda" ||
		in[0].From[0].PodSelector.MatchLabels["app.kubernetes.io/component"] != "interceptor" || in[0].From[0].IPBlock != nil {
		t.Errorf("function ingress %+v, want the interceptor's pods in keda on 8080 only", in)
	}
	if len(jobPolicy.Spec.Ingress) != 0 {
		t.Errorf("job ingress %+v, want none", jobPolicy.Spec.Ingress)
	}
	opts.Network.Enabled = false
	if p := MakeTenantNetworkPolicies("sless-abc", opts); p != nil {
		t.Errorf("turned off, rendered %v", p)
	}
}

func TestParseEgressRule(t *testing.T) {
	for _, c := range []struct {
		in, want, err string
	}{
		{in: "10.0.0.0/8", want: "10.0.0.0/8 0 "},
		{in: "10.1.2.3/32:5432", want: "10.1.2.3/32 5432 TCP"},
		{in: "169.254.20.10/32:53/udp", want: "169.254.20.10/32 53 UDP"},
		{in: "fd00::/8:443/SCTP", want: "fd00::/8 443 SCTP"},
		{in: "10.1.2.3/24", want: "10.1.2.0/24 0 "},
		{in: "10.1.2.3", err: "no prefix length"},
		{in: "10.1.2.3/33", err: "want CIDR[:PORT[/PROTOCOL]]"},
		{in: "10.1.2.3/32:0", err: "the port is not 1-65535"},
		{in: "10.1.2.3/32:http", err: "the port is not 1-65535"},
		{in: "10.1.2.3/32:53/icmp", err: "the protocol is not TCP, UDP or SCTP"},
	} {
		r, err := ParseEgressRule(c.in)
		got := r.CIDR.String() + " " + strconv.Itoa(int(r.Port)) + " " + string(r.Protocol)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error with %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %q %v, want %q", c.in, got, err, c.want)
		}
	}
}
