package buildkit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stores returns both real implementations, each empty with its bucket ensured; under
// -short the directory store alone (the S3 one needs versitygw).
func stores(t *testing.T) map[string]Store {
	t.Helper()
	fsStore, err := NewFSStore(filepath.Join(t.TempDir(), "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Store{"fs": fsStore}
	if !testing.Short() {
		s3, err := NewS3Store(startVersityGW(t))
		if err != nil {
			t.Fatal(err)
		}
		out["s3"] = s3
	}
	for name, s := range out {
		if err := s.EnsureBucket(context.Background()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := s.EnsureBucket(context.Background()); err != nil {
			t.Fatalf("%s: second EnsureBucket: %v", name, err)
		}
	}
	return out
}

func TestStores(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			put := func(key, body string) {
				t.Helper()
				if err := s.Put(ctx, key, strings.NewReader(body), int64(len(body)), "text/plain"); err != nil {
					t.Fatal(err)
				}
			}
			put("functions/ns/a/1.zip", "one")
			put("functions/ns/a/2.zip", "two")
			put("functions/ns/ab/1.zip", "other function")
			put("contexts/ns/a/1.tar.gz", "ctx")
			put("functions/ns/a/1.zip", "one, replaced")

			rc, err := s.Get(ctx, "functions/ns/a/1.zip")
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(rc)
			rc.Close()
			if string(got) != "one, replaced" {
				t.Errorf("get = %q", got)
			}
			if _, err := s.Get(ctx, "functions/ns/a/missing.zip"); !errors.Is(err, ErrNotFound) {
				t.Errorf("missing key: %v, want ErrNotFound", err)
			}
			objs, err := s.List(ctx, "functions/ns/a/")
			if err != nil {
				t.Fatal(err)
			}
			if len(objs) != 2 || objs[0].Key != "functions/ns/a/1.zip" || objs[1].Key != "functions/ns/a/2.zip" || objs[0].Size != int64(len("one, replaced")) {
				t.Errorf("list = %+v", objs)
			}
			if objs, _ := s.List(ctx, "functions/ns/a"); len(objs) != 3 {
				t.Errorf("a partial prefix matches a and ab: %+v", objs)
			}
			n, err := s.DeletePrefix(ctx, "functions/ns/a/")
			if err != nil || n != 2 {
				t.Fatalf("delete = %d, %v", n, err)
			}
			if objs, _ := s.List(ctx, "functions/"); len(objs) != 1 || objs[0].Key != "functions/ns/ab/1.zip" {
				t.Errorf("after delete: %+v", objs)
			}
			if n, err := s.DeletePrefix(ctx, "functions/nothing/"); err != nil || n != 0 {
				t.Errorf("deleting an empty prefix = %d, %v", n, err)
			}
			for _, bad := range []string{"../x", "/abs", "a/../../b", ""} {
				if err := s.Put(ctx, bad, strings.NewReader("x"), 1, ""); err == nil {
					t.Errorf("key %q accepted", bad)
				}
			}
		})
	}
}

func TestArtifacts(t *testing.T) {
	zipData := makeZip(t, file("handler.py", "def handle(e):\n    return e\n"), file("lib/util.py", "X = 1\n"))
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			a := Artifacts{Store: s}
			src, err := ValidateBytes(ctx, zipData, "python3.11", "", DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			bc, err := NewBuildContext(ctx, src)
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			first, err := a.SaveUpload(ctx, "team", "hello", t0, zipData, bc)
			if err != nil {
				t.Fatal(err)
			}
			second, err := a.SaveUpload(ctx, "team", "hello", t0.Add(time.Second), zipData, bc)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.SaveUpload(ctx, "team", "other", t0, zipData, bc); err != nil {
				t.Fatal(err)
			}
			if first.ContextKey != "contexts/team/hello/20260301T120000.000000000Z.tar.gz" || first.ZipKey != "functions/team/hello/20260301T120000.000000000Z.zip" || first.ImageTag != bc.ImageTag() {
				t.Errorf("upload = %+v", first)
			}
			latest, err := a.LatestZipKey(ctx, "team", "hello")
			if err != nil || latest != second.ZipKey {
				t.Fatalf("latest = %q, %v; want %q", latest, err, second.ZipKey)
			}
			if k, _ := ZipKeyForContext(second.ContextKey); k != second.ZipKey {
				t.Errorf("zip key for context = %q", k)
			}
			arch, err := a.OpenSource(ctx, latest)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, f := range arch.Files {
				names = append(names, f.Name)
			}
			if strings.Join(names, ",") != "handler.py,lib/util.py" {
				t.Errorf("source files = %v (generated files must not show)", names)
			}
			if body, err := arch.ReadFile("lib/util.py"); err != nil || string(body) != "X = 1\n" {
				t.Errorf("read = %q, %v", body, err)
			}
			rc, err := s.Get(ctx, first.ContextKey)
			if err != nil {
				t.Fatal(err)
			}
			stored, _ := io.ReadAll(rc)
			rc.Close()
			if !bytes.Equal(stored, bc.Data) {
				t.Error("stored context differs")
			}

			if err := a.DeleteFunction(ctx, "team", "hello"); err != nil {
				t.Fatal(err)
			}
			if _, err := a.LatestZipKey(ctx, "team", "hello"); !errors.Is(err, ErrNotFound) {
				t.Errorf("after delete: %v, want ErrNotFound", err)
			}
			if objs, _ := s.List(ctx, ""); len(objs) != 2 {
				t.Errorf("the other function's artifacts must stay: %+v", objs)
			}
			if err := a.DeleteFunction(ctx, "team", "../x"); err == nil {
				t.Error("a name with / accepted")
			}
		})
	}
}

func TestFSStoreLeavesNoTempFiles(t *testing.T) {
	dir := t.TempDir()
	s, _ := NewFSStore(dir)
	ctx := context.Background()
	if err := s.Put(ctx, "a/b.zip", strings.NewReader("short"), 10, ""); err == nil {
		t.Fatal("size mismatch accepted")
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "a"))
	if len(entries) != 0 {
		t.Errorf("leftovers after a failed put: %v", entries)
	}
	if _, err := s.DeletePrefix(ctx, "a/"); err != nil {
		t.Fatal(err)
	}
}
