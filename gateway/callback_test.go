package gateway

import (
	"strings"
	"testing"
)

// TestHostAllowed: the one rule deciding which hosts an asynchronous invocation's callback
// may name (--async-callback-hosts), in the gateway of a cluster and of sless dev alike.
func TestHostAllowed(t *testing.T) {
	allowed := []string{"hooks.example.com", "*.callbacks.example.org", "Upper.Example.NET.", "10.0.0.7", "::1", "*.0.1"}
	for _, c := range []struct {
		host string
		want bool
	}{
		{"hooks.example.com", true},
		{"HOOKS.Example.com", true},
		{"hooks.example.com.", true},
		{"upper.example.net", true},
		{"a.callbacks.example.org", true},
		{"a.b.callbacks.example.org", true},
		{"callbacks.example.org", false}, // "*." is subdomains only
		{"evilcallbacks.example.org", false},
		{"callbacks.example.org.evil.com", false},
		{"hooks.example.com.evil.com", false},
		{"xhooks.example.com", false},
		{"sub.hooks.example.com", false}, // exact entries do not cover subdomains
		{"example.com", false},
		{"10.0.0.7", true},
		{"10.0.0.8", false},
		{"::1", true},
		{"0:0:0:0:0:0:0:1", true},
		{"127.0.0.1", false}, // an address never matches a "*." entry ("*.0.1")
		{"169.254.169.254", false},
		{"", false},
		{".", false},
	} {
		if got := hostAllowed(c.host, allowed); got != c.want {
			t.Errorf("hostAllowed(%q) = %v, want %v", c.host, got, c.want)
		}
	}
	if hostAllowed("hooks.example.com", nil) {
		t.Error("no entries must allow nothing")
	}
	if hostAllowed("a.example.com", []string{"*."}) || hostAllowed("x", []string{"*"}) {
		t.Error("a bare wildcard must allow nothing")
	}
}

// TestCallbackURL: a callback is an absolute http(s) URL without credentials on an allowed
// host; the refusals name the header and the fix.
func TestCallbackURL(t *testing.T) {
	p := &fnProxy{callbackHosts: []string{"hooks.example.com", "127.0.0.1"}}
	for _, c := range []struct {
		raw, want, err string
	}{
		{"", "", ""},
		{"https://hooks.example.com/done?x=1", "https://hooks.example.com/done?x=1", ""},
		{"http://127.0.0.1:8080/hook", "http://127.0.0.1:8080/hook", ""},
		{"https://other.example.com/", "", "not one the operator allows"},
		{"https://user:pw@hooks.example.com/", "", "without credentials"},
		{"ftp://hooks.example.com/", "", "http(s)"},
		{"/relative", "", "http(s)"},
		{"https://hooks.example.com/#frag", "", "http(s)"},
		{"http://localhost:8080/", "", "not one the operator allows"},
	} {
		got, err := p.callbackURL(c.raw)
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("callbackURL(%q) = %q, %v; want %q, error with %q", c.raw, got, err, c.want, c.err)
		}
	}
	off := &fnProxy{}
	if _, err := off.callbackURL("https://hooks.example.com/"); err == nil || !strings.Contains(err.Error(), "--async-callback-hosts") {
		t.Errorf("no allowlist: %v", err)
	}
}
