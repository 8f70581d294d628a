package sourcezip

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	za, err := Zip(a)
	if err != nil {
		t.Fatal(err)
	}
	zb, err := Zip(b)
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
		}, "use code_path"},
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
				func(d string) error { _, err := Zip(d); return err },
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
			strings.HasPrefix(name, ".git") || strings.HasPrefix(name, ".terraform") || len(name) > 100 {
			return // not a portable relative path
		}
		dir := t.TempDir()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if os.MkdirAll(filepath.Dir(p), 0o755) != nil || os.WriteFile(p, content, 0o644) != nil {
			return // a name the file system refuses
		}
		data, err := Zip(dir)
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
