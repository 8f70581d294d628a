package rules

import (
	"net/netip"
	"slices"
)

// nonPublic are the address ranges the platform never connects to on a tenant's behalf
// unless the operator named the host, and that a function's egress leaves out
// (scaling.MakeTenantNetworkPolicies in a cluster, the routes of sless dev's function
// namespaces): "this network" (0/8), private (RFC 1918, IPv6 ULA — fd00:ec2::254 included),
// loopback, link-local (169.254.169.254 and the other cloud metadata addresses), CGNAT (the
// shared address space of RFC 6598, in use as pod and node networks), multicast and the
// reserved 240/4.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
}

// NonPublicPrefixes are the ranges PublicAddress refuses (IPv4-mapped IPv6 addresses aside,
// which it judges as the IPv4 address they carry).
func NonPublicPrefixes() []netip.Prefix { return slices.Clone(nonPublic) }

// PublicAddress reports whether the platform may connect to ip on a tenant's behalf (a
// callback, a prebuilt image's registry, a sandboxed function's own connection) without the
// operator having named the host: not in NonPublicPrefixes. IPv4-mapped IPv6 addresses are
// judged as the IPv4 address they carry.
func PublicAddress(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsValid() && !slices.ContainsFunc(nonPublic, func(p netip.Prefix) bool { return p.Contains(ip) })
}
