package rules

import "net/netip"

// cgnat is the shared address space (RFC 6598), in use as pod and node networks.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// PublicAddress reports whether the platform may connect to ip on a tenant's behalf (a
// callback, a prebuilt image's registry) without the operator having named the host: not
// loopback, private (RFC 1918, IPv6 ULA — fd00:ec2::254 included), link-local (169.254.169.254
// and the other cloud metadata addresses), CGNAT, unspecified or multicast. IPv4-mapped IPv6
// addresses are judged as the IPv4 address they carry.
func PublicAddress(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsValid() && !(ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() || cgnat.Contains(ip))
}
