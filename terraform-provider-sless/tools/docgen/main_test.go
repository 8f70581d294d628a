package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsUpToDate regenerates the documentation and compares it with docs/: a schema change
// without `go run ./tools/docgen` fails here.
func TestDocsUpToDate(t *testing.T) {
	tmp := t.TempDir()
	examples := []string{filepath.Join("..", "..", "..", "examples", "terraform", "main.tf"), filepath.Join("..", "..", "examples", "secrets", "main.tf")}
	if err := generate(tmp, examples); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(tmp, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(tmp, p)
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join("..", "..", "docs", rel))
		if err != nil || string(got) != string(want) {
			t.Errorf("docs/%s is stale or missing; run `go run ./tools/docgen` in terraform-provider-sless", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestExampleBlocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "main.tf")
	config := `terraform {
  required_providers {}
}

# The provider.
provider "sless" {}

# not attached: a blank line follows

# Two lines
# of comment.
resource "sless_function" "a" {
  name = "a"
  env_vars = {
    K = "v"
  }
}

data "sless_function" "a" {
  name = "a"
}
`
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := exampleBlocks(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]string{
		"terraform":               "terraform {\n  required_providers {}\n}",
		"provider sless":          "# The provider.\nprovider \"sless\" {}",
		"resource sless_function": "# Two lines\n# of comment.\nresource \"sless_function\" \"a\" {\n  name = \"a\"\n  env_vars = {\n    K = \"v\"\n  }\n}",
		"data sless_function":     "data \"sless_function\" \"a\" {\n  name = \"a\"\n}",
	}
	for key, want := range tests {
		if got := blocks[key]; len(got) != 1 || got[0] != want {
			t.Errorf("%s: got %q, want %q", key, got, want)
		}
	}
	if len(blocks) != len(tests) {
		t.Errorf("blocks %v, want only %d", blocks, len(tests))
	}
	os.WriteFile(path, []byte("resource \"x\" \"y\" {\n  a = 1\n"), 0o644)
	if _, err := exampleBlocks(path); err == nil || !strings.Contains(err.Error(), "not closed") {
		t.Fatalf("unclosed block: %v", err)
	}
}

// FuzzExampleBlocks: any configuration text is cut without panicking, and every block cut
// starts with its keyword line (after comments) and ends with its closing brace.
func FuzzExampleBlocks(f *testing.F) {
	f.Add("resource \"sless_function\" \"a\" {\n  name = \"a\"\n}\n")
	f.Add("# c\nprovider \"sless\" {}\n")
	f.Add("data \"x\" \"y\" {\n")
	f.Fuzz(func(t *testing.T, config string) {
		path := filepath.Join(t.TempDir(), "main.tf")
		if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		blocks, err := exampleBlocks(path)
		if err != nil {
			return
		}
		for key, list := range blocks {
			for _, b := range list {
				if !strings.HasSuffix(b, "}") || !strings.Contains(b, strings.SplitN(key, " ", 2)[0]+" ") {
					t.Fatalf("block %s = %q", key, b)
				}
			}
		}
	})
}
