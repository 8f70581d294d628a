package provider

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// appliedExamples are the configurations tests apply (TestAccExampleWithDevOverrides,
// TestAccSecretExample), relative to this module: every .tf file of their directories.
var appliedExamples = []string{
	filepath.Join("..", "examples", "terraform", "*.tf"),
	filepath.Join("examples", "secrets", "*.tf"),
}

// TestDocExamplesAreApplied: every block of the examples tfplugindocs puts on the reference
// pages (examples/provider, examples/resources, examples/data-sources) is, comments and
// all, a block of a configuration a test applies, so no page shows an example that does
// not work.
func TestDocExamplesAreApplied(t *testing.T) {
	module := filepath.Join("..", "..")
	var applied strings.Builder
	for _, pattern := range appliedExamples {
		files, err := filepath.Glob(filepath.Join(module, pattern))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v, %d files", pattern, err, len(files))
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			applied.Write(b)
		}
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
