package buildkit

import (
	"archive/zip"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// zipEntry describes one crafted zip entry; header fields override the defaults.
type zipEntry struct {
	name   string
	body   []byte
	mode   fs.FileMode
	method uint16
	raw    *zip.FileHeader // written with CreateRaw: sizes and CRC as given
}

func makeZip(t testing.TB, entries ...zipEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		if e.raw != nil {
			w, err := zw.CreateRaw(e.raw)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(e.body); err != nil {
				t.Fatal(err)
			}
			continue
		}
		hdr := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)}
		if e.method != 0 {
			hdr.Method = e.method
		}
		if e.mode != 0 {
			hdr.SetMode(e.mode)
		}
		w, err := zw.CreateHeader(hdr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func file(name, body string) zipEntry { return zipEntry{name: name, body: []byte(body)} }

// zipDir zips a directory tree the way a user (or the Terraform provider) would.
func zipDir(t testing.TB, dir string) []byte {
	t.Helper()
	var entries []zipEntry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		body, err := os.ReadFile(p)
		entries = append(entries, zipEntry{name: filepath.ToSlash(rel), body: body})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	return makeZip(t, entries...)
}

// randomBytes returns incompressible deterministic bytes.
func randomBytes(n int) []byte {
	out := make([]byte, n)
	x := uint64(0x9E3779B97F4A7C15)
	for i := range out {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		out[i] = byte(x)
	}
	return out
}
