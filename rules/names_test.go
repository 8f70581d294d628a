package rules_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sless.dev/sless/rules"
)

func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{
		"hello": true, "a": true, "a-1": true, "0x": true, strings.Repeat("a", 63): true,
		"": false, "Hello": false, "-a": false, "a-": false, "a_b": false, "a.b": false, strings.Repeat("a", 64): false,
	} {
		if err := rules.CheckName(name); (err == nil) != ok {
			t.Errorf("CheckName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestCheckEnvName(t *testing.T) {
	for name, want := range map[string]string{
		"PATH_X": "", "_x": "", "a1": "",
		"1ABC": "invalid variable name", "A-B": "invalid variable name", "": "invalid variable name",
		"SLESS_MODE": "SLESS_ prefix is reserved", "LD_PRELOAD": "reserved", "PATH": "reserved", "PYTHONPATH": "reserved",
	} {
		err := rules.CheckEnvName(name)
		if (err == nil) != (want == "") || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("CheckEnvName(%q) = %v, want %q", name, err, want)
		}
	}
}

// TestCRDNamePattern: the CRDs' name pattern is the rules' (markers can only hold literals).
func TestCRDNamePattern(t *testing.T) {
	for _, crd := range []string{"sless.dev_functionjobs.yaml", "sless.dev_triggers.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "config", "crd", "bases", crd))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "pattern: "+rules.NamePattern.String()) {
			t.Errorf("%s: the functionRef name pattern is not %s", crd, rules.NamePattern)
		}
	}
}

// TestCRDReservedEnvNames: the CRDs' env rule refuses every reserved name (a marker can
// only hold the list as a literal).
func TestCRDReservedEnvNames(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "config", "crd", "bases", "sless.dev_functions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range rules.ReservedEnvNames {
		if !strings.Contains(string(data), "'"+name+"'") {
			t.Errorf("the Function CRD's env rule does not refuse %s", name)
		}
	}
}
