package devplane_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoHTTPServerImport holds the local control plane off the gateway's HTTP server: it
// implements the contract in gateway/backend, and the server is wired to it by cmd/sless.
// It asks the go command rather than go/build, which finds no GOROOT in a -trimpath binary.
func TestNoHTTPServerImport(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := map[string]bool{"sless.dev/sless/gateway": true, "sless.dev/sless/gateway/cluster": true}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		seen[fields[0]] = true
		for _, imp := range fields[1:] {
			if forbidden[imp] {
				t.Errorf("devplane imports %s (through %s); depend on gateway/backend instead", imp, fields[0])
			}
		}
	}
	if !seen["sless.dev/sless/gateway/backend"] {
		t.Error("devplane does not implement gateway/backend any more; update this test")
	}
}
