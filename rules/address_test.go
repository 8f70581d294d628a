package rules_test

import (
	"net/netip"
	"testing"

	"sless.dev/sless/rules"
)

// TestPublicAddress: the addresses a tenant-chosen host name may lead to.
func TestPublicAddress(t *testing.T) {
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"93.184.216.34", true},
		{"8.8.8.8", true},
		{"2606:4700::1111", true},
		{"127.0.0.1", false},
		{"127.1.2.3", false},
		{"::1", false},
		{"10.96.0.1", false},       // a ClusterIP
		{"172.16.0.5", false},      // private
		{"192.168.1.1", false},     // private
		{"169.254.169.254", false}, // cloud metadata
		{"fd00:ec2::254", false},   // AWS metadata over IPv6
		{"fe80::1", false},
		{"fd00::1", false},
		{"100.64.0.1", false}, // CGNAT
		{"0.0.0.0", false},
		{"::", false},
		{"224.0.0.1", false},
		{"ff02::1", false},
		{"ff01::1", false},
		{"::ffff:127.0.0.1", false}, // IPv4-mapped loopback
		{"::ffff:10.0.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"::ffff:93.184.216.34", true},
		{"240.0.0.1", false},
		{"255.255.255.255", false},
		{"0.1.2.3", false},
		{"11.0.0.1", true},
		{"172.32.0.1", true},
		{"100.128.0.1", true},
	} {
		if got := rules.PublicAddress(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("PublicAddress(%s) = %v, want %v", c.addr, got, c.want)
		}
	}
	if rules.PublicAddress(netip.Addr{}) {
		t.Error("the zero address is public")
	}
}
