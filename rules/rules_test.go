package rules_test

import (
	"strings"
	"testing"
	"time"

	"sless.dev/sless/rules"
)

func TestHTTPGate(t *testing.T) {
	on, off := rules.HTTPTrigger{Enabled: true}, rules.HTTPTrigger{}
	authOn, authOff := rules.HTTPTrigger{Enabled: true, RequireAuth: true}, rules.HTTPTrigger{RequireAuth: true}
	cases := []struct {
		name     string
		triggers []rules.HTTPTrigger
		want     rules.Gate
	}{
		{"no http trigger: reachable, public", nil, rules.Gate{}},
		{"one enabled", []rules.HTTPTrigger{on}, rules.Gate{}},
		{"one disabled", []rules.HTTPTrigger{off}, rules.Gate{Disabled: true}},
		{"all disabled", []rules.HTTPTrigger{off, authOff}, rules.Gate{Disabled: true}},
		{"one of two enabled", []rules.HTTPTrigger{off, on}, rules.Gate{}},
		{"enabled with auth", []rules.HTTPTrigger{authOn}, rules.Gate{RequireAuth: true}},
		{"auth on a disabled one does not count", []rules.HTTPTrigger{on, authOff}, rules.Gate{}},
		{"auth on any enabled one wins", []rules.HTTPTrigger{on, authOn}, rules.Gate{RequireAuth: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := rules.HTTPGate(tc.triggers); got != tc.want {
				t.Fatalf("HTTPGate = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestFunctionReady(t *testing.T) {
	cases := []struct {
		ready         bool
		gen, observed int64
		want          bool
	}{
		{true, 3, 3, true},
		{true, 3, 2, false}, // Ready for an older spec: the new one may not build
		{false, 3, 3, false},
		{true, 1, 0, false},
	}
	for _, tc := range cases {
		if got := rules.FunctionReady(tc.ready, tc.gen, tc.observed); got != tc.want {
			t.Errorf("FunctionReady(%v, %d, %d) = %v, want %v", tc.ready, tc.gen, tc.observed, got, tc.want)
		}
	}
}

func TestCurrentMessage(t *testing.T) {
	if got := rules.CurrentMessage("waiting for source", 2, 1); got != "applying the latest change" {
		t.Errorf("a message of an older generation: %q", got)
	}
	if got := rules.CurrentMessage("serving", 2, 2); got != "serving" {
		t.Errorf("the current generation's message: %q", got)
	}
}

func TestNamesAndDeadlines(t *testing.T) {
	if got := rules.RoutingHost("ns", "fn", rules.DefaultDomain); got != "fn.ns.fn.sless.local" {
		t.Errorf("RoutingHost = %q", got)
	}
	for _, base := range []string{"https://gw.example", "https://gw.example/"} {
		if got := rules.FunctionURL(base, "ns", "fn"); got != "https://gw.example/fn/ns/fn" {
			t.Errorf("FunctionURL(%q) = %q", base, got)
		}
	}
	for _, tc := range []struct {
		sec  int32
		want time.Duration
	}{{0, 0}, {-1, 0}, {1, 6 * time.Second}, {900, 905 * time.Second}} {
		if got := rules.InvocationDeadline(tc.sec); got != tc.want {
			t.Errorf("InvocationDeadline(%d) = %s, want %s", tc.sec, got, tc.want)
		}
	}
}

func TestProtocolProblem(t *testing.T) {
	for _, c := range []struct {
		protocol, image, want string
	}{
		{"", "", ""},
		{"", "reg/app:1", ""},
		{rules.ProtocolHTTP1, "", ""},
		{rules.ProtocolH2C, "reg/app:1", ""},
		{rules.ProtocolH2C, "", "needs a prebuilt image"},
		{"h2", "reg/app:1", `unknown protocol "h2"`},
		{"HTTP1", "", `unknown protocol "HTTP1"`},
	} {
		if c.want == "" && rules.StoredProtocol(c.protocol) != map[string]string{"": "", rules.ProtocolHTTP1: "", rules.ProtocolH2C: rules.ProtocolH2C}[c.protocol] {
			t.Errorf("StoredProtocol(%q) = %q: the default is stored unset, h2c as is", c.protocol, rules.StoredProtocol(c.protocol))
		}
		got := rules.ProtocolProblem(c.protocol, c.image)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("ProtocolProblem(%q, %q) = %q, want %q", c.protocol, c.image, got, c.want)
		}
	}
}
