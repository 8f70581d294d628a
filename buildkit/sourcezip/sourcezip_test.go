package sourcezip

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/patternmatcher"
)

func writeTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func mustHash(t *testing.T, dir string) string {
	t.Helper()
	h, err := Hash(dir)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHashChangesWithWhatTheBuildSees(t *testing.T) {
	base := map[string]string{"handler.go": "package handler\n", "lib/util.go": "package lib\n"}
	tests := []struct {
		name   string
		change func(t *testing.T, dir string)
		same   bool
	}{
		{"edit a file", func(t *testing.T, dir string) {
			writeTree(t, dir, map[string]string{"lib/util.go": "package lib // v2\n"})
		}, false},
		{"add a file", func(t *testing.T, dir string) { writeTree(t, dir, map[string]string{"go.mod": "module x\n"}) }, false},
		{"remove a file", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "lib/util.go")) }, false},
		{"rename a file", func(t *testing.T, dir string) {
			os.Rename(filepath.Join(dir, "lib/util.go"), filepath.Join(dir, "lib/util2.go"))
		}, false},
		{"make a file executable", func(t *testing.T, dir string) { os.Chmod(filepath.Join(dir, "handler.go"), 0o755) }, false},
		{"move bytes between files", func(t *testing.T, dir string) {
			writeTree(t, dir, map[string]string{"handler.go": "package handler\npackage lib", "lib/util.go": "\n"})
		}, false},
		{"touch a file", func(t *testing.T, dir string) {
			later := time.Now().Add(time.Hour)
			os.Chtimes(filepath.Join(dir, "handler.go"), later, later)
		}, true},
		{"change a non-exec permission", func(t *testing.T, dir string) { os.Chmod(filepath.Join(dir, "handler.go"), 0o600) }, true},
		{"add to .git", func(t *testing.T, dir string) { writeTree(t, dir, map[string]string{".git/HEAD": "ref: x\n"}) }, true},
		{"add to .terraform", func(t *testing.T, dir string) { writeTree(t, dir, map[string]string{".terraform/x": "y"}) }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, base)
			before := mustHash(t, dir)
			tc.change(t, dir)
			after := mustHash(t, dir)
			if (before == after) != tc.same {
				t.Fatalf("hash same=%v, want same=%v", before == after, tc.same)
			}
		})
	}
}

func TestZipIsDeterministic(t *testing.T) {
	files := map[string]string{"handler.py": "def handle(e):\n    return e\n", "pkg/a.py": "A = 1\n", "requirements.txt": ""}
	a, b := t.TempDir(), t.TempDir()
	writeTree(t, a, files)
	writeTree(t, b, files)
	// Different timestamps and creation order must not matter.
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	os.Chtimes(filepath.Join(b, "handler.py"), old, old)
	za, _, err := Zip(a)
	if err != nil {
		t.Fatal(err)
	}
	zb, _, err := Zip(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(za, zb) {
		t.Fatal("zips of the same files differ")
	}
	zr, err := zip.NewReader(bytes.NewReader(za), int64(len(za)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != files[f.Name] {
			t.Errorf("%s: content %q, want %q", f.Name, got, files[f.Name])
		}
		if !f.Modified.Equal(zipTime) {
			t.Errorf("%s: modified %v, want the fixed %v", f.Name, f.Modified, zipTime)
		}
	}
	if want := "handler.py,pkg/a.py,requirements.txt"; strings.Join(names, ",") != want {
		t.Fatalf("entries %v, want %s", names, want)
	}
}

func TestSourceDirErrors(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T) string
		problem string
	}{
		{"missing", func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") }, "cannot read it"},
		{"a file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "f.zip")
			writeTree(t, filepath.Dir(p), map[string]string{"f.zip": "x"})
			return p
		}, "not a folder"},
		{"empty", func(t *testing.T) string { return t.TempDir() }, "no files"},
		{"only ignored files", func(t *testing.T) string {
			dir := t.TempDir()
			writeTree(t, dir, map[string]string{".git/config": "x"})
			return dir
		}, "no files"},
		{"symlink", func(t *testing.T) string {
			dir := t.TempDir()
			writeTree(t, dir, map[string]string{"handler.go": "package handler\n"})
			if err := os.Symlink("/etc/passwd", filepath.Join(dir, "leak")); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "leak: not a regular file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.setup(t)
			for _, run := range []func(string) error{
				func(d string) error { _, err := Hash(d); return err },
				func(d string) error { _, _, err := Zip(d); return err },
			} {
				err := run(dir)
				var se *Error
				if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.problem) || !strings.Contains(err.Error(), dir) {
					t.Fatalf("error %v, want a *sourcezip.Error naming %s and %q", err, dir, tc.problem)
				}
			}
		})
	}
}

// FuzzZipRoundTrip checks that any file content zips and reads back unchanged and that the
// hash depends on it.
func FuzzZipRoundTrip(f *testing.F) {
	f.Add("handler.go", []byte("package handler\n"))
	f.Add("a/b/c.txt", []byte{0, 1, 2, 255})
	f.Add("x", []byte{})
	f.Fuzz(func(t *testing.T, name string, content []byte) {
		if name == "" || strings.ContainsAny(name, "\\\x00:") || strings.Contains(name, "..") ||
			strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//") ||
			path.Clean(name) != name || len(name) > 100 {
			return // not a portable relative path
		}
		if ignored, _ := patternmatcher.MatchesOrParentMatches(name, DefaultIgnore); ignored {
			return // left out of every upload
		}
		dir := t.TempDir()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if os.MkdirAll(filepath.Dir(p), 0o755) != nil || os.WriteFile(p, content, 0o644) != nil {
			return // a name the file system refuses
		}
		data, _, err := Zip(dir)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil || len(zr.File) != 1 || zr.File[0].Name != name {
			t.Fatalf("zip of %q: %v %v", name, err, zr)
		}
		rc, _ := zr.File[0].Open()
		got, _ := io.ReadAll(rc)
		if !bytes.Equal(got, content) {
			t.Fatalf("content changed in the zip")
		}
		h1, _ := Hash(dir)
		os.WriteFile(p, append(content, 'x'), 0o644)
		if h2, _ := Hash(dir); h1 == h2 {
			t.Fatal("hash did not change with the content")
		}
	})
}

// TestIgnore: what every upload leaves out, and .slessignore patterns in .dockerignore's
// syntax (from the root, `**`, `!` taking a path back), a link that is left out not an error.
func TestIgnore(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"handler.py":                "x",
		"lib/util.py":               "x",
		"lib/cache.tmp":             "x",
		"cache.tmp":                 "x",
		"data/big.bin":              "x",
		"docs/data/keep.md":         "x",
		"build":                     "a file named like an ignored folder elsewhere",
		"out/build/x":               "x",
		".git/config":               "x",
		"sub/.git/config":           "x",
		"node_modules/m/index.js":   "x",
		"pkg/node_modules/b/x.json": "x",
		"node_modules.txt":          "x",
		"vendor/node_modules/keep":  "taken back by !",
		"sub/__pycache__/a.pyc":     "x",
		"sub/.venv/bin/python":      "x",
		"sub/keep.txt":              "x",
		"docs/.DS_Store":            "x",
		".terraform/providers/x":    "x",
		".sless/dev-signing.key":    "x",
		"sless.yaml":                "runtime: python3.12\n",
		"conf/sless.yaml":           "x",
		"bin/run.sh":                "#!/bin/sh\n",
		IgnoreFile:                  "# comment\n**/*.tmp\n/data/\nout/**/build\n!vendor/node_modules/keep\nlinks\n",
	})
	if err := os.Chmod(filepath.Join(dir, "bin", "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "links"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "links", "passwd")); err != nil {
		t.Fatal(err)
	}
	files, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
		if (f.Name == "bin/run.sh") != f.Exec {
			t.Errorf("%s: exec %v", f.Name, f.Exec)
		}
	}
	want := []string{IgnoreFile, "bin/run.sh", "build", "conf/sless.yaml", "docs/data/keep.md", "handler.py", "lib/util.py", "node_modules.txt", "sub/keep.txt", "vendor/node_modules/keep"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("listed %q\nwant   %q", names, want)
	}
	data, n, err := Zip(dir)
	if err != nil || n != len(want) {
		t.Fatalf("Zip: %d files, %v", n, err)
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil || len(zr.File) != len(want) {
		t.Fatalf("zip: %v, %d entries", err, len(zr.File))
	}
}

func TestIgnoreFileErrors(t *testing.T) {
	for _, content := range []string{"ok\n[bad\n", "!\n"} {
		dir := t.TempDir()
		writeTree(t, dir, map[string]string{"handler.py": "x", IgnoreFile: content})
		_, err := List(dir)
		var se *Error
		if !errors.As(err, &se) || se.File != IgnoreFile {
			t.Errorf("%q: error %v, want one naming %s", content, err, IgnoreFile)
		}
	}
}
