package buildkit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
	"unicode/utf8"
)

func fuzzSeeds(f *testing.F) {
	f.Add(makeZip(f, file("handler.py", "def handle(e):\n    return e\n"), file("lib/a.py", "")))
	f.Add(makeZip(f, file("handler.js", "exports.handle = (e) => e;\n"), file("package.json", "{}")))
	f.Add(makeZip(f, goHandler, file("go.mod", "module x\n\ngo 1.23\n")))
	f.Add(makeZip(f, file("../evil", "x"), file("/abs", "y")))
	f.Add(makeZip(f, zipEntry{name: "link", body: []byte("/etc"), mode: fs.ModeSymlink | 0o777}))
	f.Add(makeZip(f, zipEntry{name: "bomb", body: make([]byte, 2<<20)}))
	f.Add(makeZip(f, file("a", "1"), file("a", "2"), file("a/b", "3")))
	f.Add([]byte("PK\x05\x06" + strings.Repeat("\x00", 18)))
	f.Add([]byte{})
}

// FuzzOpenArchive: any bytes either fail with a *ValidationError or give an archive whose
// names are safe and whose files read fully or fail with a *ValidationError.
func FuzzOpenArchive(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := OpenArchive(bytes.NewReader(data), int64(len(data)), DefaultLimits())
		if err != nil {
			if _, ok := AsValidationError(err); !ok {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, f := range a.Files {
			if seen[f.Name] || !utf8.ValidString(f.Name) || strings.HasPrefix(f.Name, "/") || f.Name == "." ||
				strings.Contains("/"+f.Name+"/", "/../") || strings.Contains(f.Name, "\\") {
				t.Fatalf("unsafe or duplicate name accepted: %q", f.Name)
			}
			seen[f.Name] = true
			rc, err := f.Open()
			if err == nil {
				_, err = io.Copy(io.Discard, rc)
				rc.Close()
			}
			if err != nil {
				if _, ok := AsValidationError(err); !ok {
					t.Fatalf("reading %q: untyped error %v", f.Name, err)
				}
			}
		}
	})
}

// FuzzValidate: a source that validates always yields a build context, or a
// *ValidationError for damaged data, and the context only holds the expected layout.
func FuzzValidate(f *testing.F) {
	fuzzSeeds(f)
	names := RuntimeNames()
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, rt := range names {
			src, err := ValidateBytes(context.Background(), data, rt, "", DefaultLimits())
			if err != nil {
				var ve *ValidationError
				if !errors.As(err, &ve) || ve.Reason == "" || ve.Fix == "" {
					t.Fatalf("%s: error without reason and fix: %v", rt, err)
				}
				continue
			}
			bc, err := NewBuildContext(context.Background(), src)
			if err != nil {
				if _, ok := AsValidationError(err); !ok {
					t.Fatalf("%s: build context: untyped error %v", rt, err)
				}
				continue
			}
			files, _ := readTarGz(t, bc.Data)
			for name := range files {
				if name != DockerfilePath && name != "go.work" && !strings.HasPrefix(name, handlerDir) && !strings.HasPrefix(name, serverDir) {
					t.Fatalf("%s: unexpected context entry %q", rt, name)
				}
			}
		}
	})
}
