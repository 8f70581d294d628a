package rules_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNothingAbove holds rules and the packages below it (rulestest among them) under
// every other sless package: both control planes, the renderers, the gateway, the Terraform
// provider and their tests import them. Only the _test files of rules may import more (they
// hold CRDs and wrappers equal to rules). It asks the go command rather than go/build, which
// finds no GOROOT in a -trimpath binary.
func TestImportsNothingAbove(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{range .Imports}}{{$.ImportPath}} {{.}}{{"\n"}}{{end}}`, "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	inRules := func(pkg string) bool {
		return pkg == "sless.dev/sless/rules" || strings.HasPrefix(pkg, "sless.dev/sless/rules/")
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		from, imp, _ := strings.Cut(line, " ")
		if inRules(from) && strings.HasPrefix(imp, "sless.dev/sless/") && !inRules(imp) {
			t.Errorf("%s imports %s; rules may import nothing of sless above it", from, imp)
		}
	}
}
