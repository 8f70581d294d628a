package provider

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// appliedExamples are the configurations tests apply (TestAccExampleWithDevOverrides,
// TestAccSecretExample), relative to this module.
var appliedExamples = []string{
	filepath.Join("..", "examples", "terraform", "main.tf"),
	filepath.Join("examples", "secrets", "main.tf"),
}

// TestDocExamplesAreApplied: every block of the examples tfplugindocs puts on the reference
// pages (examples/provider, examples/resources, examples/data-sources) is, comments and
// all, a block of a configuration a test applies, so no page shows an example that does
// not work.
func TestDocExamplesAreApplied(t *testing.T) {
	module := filepath.Join("..", "..")
	var applied strings.Builder
	for _, p := range appliedExamples {
		b, err := os.ReadFile(filepath.Join(module, p))
		if err != nil {
			t.Fatal(err)
		}
		applied.Write(b)
	}
	var pages []string
	for _, pattern := range []string{"provider/*.tf", "resources/*/*.tf", "data-sources/*/*.tf"} {
		files, err := filepath.Glob(filepath.Join(module, "examples", pattern))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, files...)
	}
	if len(pages) == 0 {
		t.Fatal("no examples for the reference pages")
	}
	for _, f := range pages {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, block := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
			if !strings.Contains(applied.String(), block+"\n") {
				t.Errorf("%s: a block no applied configuration (%s) has:\n%s", f, strings.Join(appliedExamples, ", "), block)
			}
		}
	}
}
