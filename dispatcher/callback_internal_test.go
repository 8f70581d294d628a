package dispatcher

import (
	"errors"
	"testing"
)

// TestPublicAddressOnly: the dial check applies rules.PublicAddress (its table is in rules).
func TestPublicAddressOnly(t *testing.T) {
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
