package dispatcher

import (
	"errors"
	"net/netip"
	"testing"
)

// TestPublicAddress: the addresses a callback host name may lead to without the operator
// naming them literally.
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
		{"fe80::1", false},
		{"fd00::1", false},
		{"100.64.0.1", false}, // CGNAT
		{"0.0.0.0", false},
		{"::", false},
		{"224.0.0.1", false},
		{"::ffff:127.0.0.1", false}, // IPv4-mapped loopback
		{"::ffff:10.0.0.1", false},
		{"::ffff:93.184.216.34", true},
	} {
		if got := publicAddress(netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("publicAddress(%s) = %v, want %v", c.addr, got, c.want)
		}
	}
	if err := publicAddressOnly("tcp", "127.0.0.1:80", nil); !errors.Is(err, errNonPublicAddress) {
		t.Errorf("dialing loopback: %v", err)
	}
	if err := publicAddressOnly("tcp6", "[2606:4700::1111]:443", nil); err != nil {
		t.Errorf("dialing a public address: %v", err)
	}
}

// TestCallbackClientChoice: an address in the callback URL was allowed literally by the
// operator and is dialed as is; a name goes through the public-address check unless the
// configuration allows private addresses.
func TestCallbackClientChoice(t *testing.T) {
	d := &dispatcher{}
	for url, want := range map[string]any{
		"http://127.0.0.1:9/hook":        directCallbacks,
		"http://[::1]:9/hook":            directCallbacks,
		"https://hooks.example.com/hook": publicCallbacks,
		"http://localhost:9/hook":        publicCallbacks,
	} {
		if got := d.callbackClient(url); got != want {
			t.Errorf("%s: wrong client", url)
		}
	}
	d.cfg.CallbackPrivateAddresses = true
	if d.callbackClient("http://localhost:9/hook") != directCallbacks {
		t.Error("CallbackPrivateAddresses: names must dial any address")
	}
}
