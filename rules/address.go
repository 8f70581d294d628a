package rules

import "net/netip"

// NonPublicIPv4 are the IPv4 ranges PublicAddress refuses: "this network", RFC 1918, CGNAT
// (RFC 6598, in use as pod and node networks), loopback, link-local (cloud metadata at
// 169.254.169.254), multicast and the reserved 240/4. Where a rule is enforced by routing
// (sless dev's function namespaces) rather than per connection, it routes these nowhere.
var NonPublicIPv4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// PublicAddress reports whether the platform may connect to ip on a tenant's behalf (a
// callback, a prebuilt image's registry, a sandboxed function's own connection) without the
// operator having named the host: not in NonPublicIPv4 and, for IPv6, not loopback, ULA
// (fd00:ec2::254 included), link-local, unspecified or multicast. IPv4-mapped IPv6 addresses
// are judged as the IPv4 address they carry.
func PublicAddress(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() {
		return false
	}
	if ip.Is4() {
		for _, p := range NonPublicIPv4 {
			if p.Contains(ip) {
				return false
			}
		}
		return true
	}
	return !(ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified())
}
