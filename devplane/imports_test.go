package devplane_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestNoHTTPServerImport holds the local control plane off the gateway's HTTP server: it
// implements the contract in gateway/backend, and the server is wired to it by cmd/sless.
func TestNoHTTPServerImport(t *testing.T) {
	forbidden := map[string]bool{"sless.dev/sless/gateway": true, "sless.dev/sless/gateway/cluster": true}
	seen := map[string]bool{}
	var walk func(path, from string)
	walk = func(path, from string) {
		if seen[path] || !strings.HasPrefix(path, "sless.dev/sless/") {
			return
		}
		seen[path] = true
		if forbidden[path] {
			t.Errorf("devplane imports %s (through %s); depend on gateway/backend instead", path, from)
			return
		}
		pkg, err := build.Import(path, ".", 0)
		if err != nil {
			t.Fatalf("import %s: %v", path, err)
		}
		for _, imp := range pkg.Imports {
			walk(imp, path)
		}
	}
	walk("sless.dev/sless/devplane", "")
	if !seen["sless.dev/sless/gateway/backend"] {
		t.Error("devplane does not implement gateway/backend any more; update this test")
	}
}
