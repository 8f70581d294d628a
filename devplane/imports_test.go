package devplane_test

import (
	"testing"

	"sless.dev/sless/test/testkit"
)

// TestNoHTTPServerImport holds the local control plane off the gateway's HTTP server: it
// implements the contract in gateway/backend, and the server is wired to it by cmd/sless.
func TestNoHTTPServerImport(t *testing.T) {
	forbidden := map[string]bool{"sless.dev/sless/gateway": true, "sless.dev/sless/gateway/cluster": true}
	deps := testkit.Imports(t)
	for pkg, imports := range deps {
		for _, imp := range imports {
			if forbidden[imp] {
				t.Errorf("devplane imports %s (through %s); depend on gateway/backend instead", imp, pkg)
			}
		}
	}
	if _, ok := deps["sless.dev/sless/gateway/backend"]; !ok {
		t.Error("devplane does not implement gateway/backend any more; update this test")
	}
}
