package testkit

import (
	"os/exec"
	"strings"
	"testing"
)

// Imports maps each package the package in the working directory depends on (itself
// included) to what it imports. It asks the go command rather than go/build, which finds no
// GOROOT in a -trimpath binary.
func Imports(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		deps[fields[0]] = fields[1:]
	}
	return deps
}
