// Package sourcezip turns a function's source directory into the zip the sless API accepts,
// byte-for-byte the same for the same files, and hashes the directory's content so that a
// Terraform plan can tell whether any file changed without building the zip.
package sourcezip

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// MaxBytes caps the total size of the files read from a source directory; the API rejects
// far smaller uploads, so a bigger directory is a mistake (a build output or a VCS folder).
const MaxBytes = 256 << 20

// skipDirs are never part of a function's source: VCS metadata and Terraform's own state.
var skipDirs = map[string]bool{".git": true, ".terraform": true}

// zipTime is the modification time of every entry, so timestamps never change the archive.
var zipTime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// Error is a problem with the source directory, naming the file at fault.
type Error struct {
	Dir, File, Problem string
}

func (e *Error) Error() string {
	if e.File == "" {
		return fmt.Sprintf("source_dir %q: %s", e.Dir, e.Problem)
	}
	return fmt.Sprintf("source_dir %q: %s: %s", e.Dir, e.File, e.Problem)
}

// File is one regular file of a source directory.
type File struct {
	// Name is the slash-separated path relative to the directory.
	Name string
	// Exec is set for files with any executable bit.
	Exec bool
	path string
}

// List returns the regular files under dir in lexical order of their paths. Symbolic links,
// devices and sockets are errors (the server refuses links that leave the archive, and a
// link inside it would hash differently from what the build sees).
func List(dir string) ([]File, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, &Error{Dir: dir, Problem: fmt.Sprintf("cannot read it: %v", err)}
	}
	if !info.IsDir() {
		return nil, &Error{Dir: dir, Problem: "not a directory; use code_path for a prepared zip"}
	}
	var (
		files []File
		total int64
	)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir() && skipDirs[d.Name()] && rel != ".":
			return filepath.SkipDir
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return &Error{Dir: dir, File: rel, Problem: "not a regular file (symlink or device); copy the target into the directory instead"}
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if total += fi.Size(); total > MaxBytes {
			return &Error{Dir: dir, Problem: fmt.Sprintf("more than %d MiB of files; keep build outputs and dependencies out of it", MaxBytes>>20)}
		}
		files = append(files, File{Name: rel, Exec: fi.Mode()&0o111 != 0, path: p})
		return nil
	})
	if err != nil {
		var se *Error
		if errors.As(err, &se) {
			return nil, se
		}
		return nil, &Error{Dir: dir, Problem: err.Error()}
	}
	if len(files) == 0 {
		return nil, &Error{Dir: dir, Problem: "no files; put the handler source in it"}
	}
	return files, nil
}

// Hash is the hex sha256 of the names, executable bits and contents of dir's files. It does
// not depend on timestamps, permissions other than the executable bit, or the compressor, so
// it only changes when something the build sees changes.
func Hash(dir string) (string, error) {
	files, err := List(dir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%t\x00", f.Name, f.Exec)
		n, err := copyFile(h, f.path)
		if err != nil {
			return "", &Error{Dir: dir, File: f.Name, Problem: err.Error()}
		}
		// The length after the content keeps "ab"+"c" distinct from "a"+"bc".
		fmt.Fprintf(h, "\x00%s\x00", strconv.FormatInt(n, 10))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Zip returns the deflated zip of dir's files with fixed timestamps and modes.
func Zip(dir string) ([]byte, error) {
	files, err := List(dir)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		hdr := &zip.FileHeader{Name: f.Name, Method: zip.Deflate, Modified: zipTime}
		hdr.SetMode(0o644)
		if f.Exec {
			hdr.SetMode(0o755)
		}
		w, err := zw.CreateHeader(hdr)
		if err != nil {
			return nil, fmt.Errorf("zip %s: %w", f.Name, err)
		}
		if _, err := copyFile(w, f.path); err != nil {
			return nil, &Error{Dir: dir, File: f.Name, Problem: err.Error()}
		}
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("zip %s: %w", dir, err)
	}
	return buf.Bytes(), nil
}

func copyFile(w io.Writer, path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(w, f)
}
