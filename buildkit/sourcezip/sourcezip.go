// Package sourcezip turns a function's source folder into the zip the sless API accepts:
// the one zipper of `sless deploy`, `sless dev`'s examples and the Terraform provider, so the
// same folder uploads the same bytes (and builds the same image) whichever tool sends it. It
// also hashes the folder's content, so that a Terraform plan can tell whether a file changed
// without building the zip.
//
// What is left out: DefaultIgnore, then the patterns of the folder's .slessignore, in the
// syntax of .dockerignore (github.com/moby/patternmatcher: paths from the folder's root,
// `*`, `?`, `[…]`, `**` for any number of folders, `!` to take a path back in).
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
	"path"
	"path/filepath"
	"strconv"
	"time"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// MaxBytes caps the total size of the files read from a source folder; the API rejects far
// smaller uploads, so a bigger folder is a mistake (a build output or a VCS folder).
const MaxBytes = 256 << 20

// IgnoreFile lists more paths to leave out of the upload, one pattern a line.
const IgnoreFile = ".slessignore"

// ProjectFile is the folder's `sless init` settings, read by the CLI, never by the build.
const ProjectFile = "sless.yaml"

// DefaultIgnore is left out of every upload, before the folder's own patterns (which may
// take a path back with `!`): version control data, dependency folders the build installs
// itself (the upload limits reject them too), caches, Terraform's working folder, the data
// folder of a `sless dev` started in the function's folder, and the CLI's project file.
var DefaultIgnore = []string{
	"**/.git", "**/.hg", "**/.svn",
	"**/node_modules", "**/.venv", "**/__pycache__",
	"**/.DS_Store", "**/.terraform",
	".sless", ProjectFile,
}

// zipTime is the modification time of every entry, so timestamps never change the archive.
var zipTime = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// Error is a problem with the source folder, naming the file at fault.
type Error struct {
	Dir, File, Problem string
}

func (e *Error) Error() string {
	if e.File == "" {
		return fmt.Sprintf("source folder %q: %s", e.Dir, e.Problem)
	}
	return fmt.Sprintf("source folder %q: %s: %s", e.Dir, e.File, e.Problem)
}

// File is one regular file of a source folder.
type File struct {
	// Name is the slash-separated path relative to the folder.
	Name string
	// Exec is set for files with any executable bit.
	Exec bool
	path string
}

// matcher is DefaultIgnore and dir's IgnoreFile. A pattern the matcher cannot compile is an
// error naming it, not a silently wider upload.
func matcher(dir string) (*patternmatcher.PatternMatcher, error) {
	patterns := append([]string(nil), DefaultIgnore...)
	f, err := os.Open(filepath.Join(dir, IgnoreFile))
	switch {
	case err == nil:
		own, err := ignorefile.ReadAll(f)
		f.Close()
		if err != nil {
			return nil, &Error{Dir: dir, File: IgnoreFile, Problem: err.Error()}
		}
		patterns = append(patterns, own...)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, &Error{Dir: dir, File: IgnoreFile, Problem: err.Error()}
	}
	for _, p := range patterns {
		pm, err := patternmatcher.New([]string{p})
		if err == nil {
			// Some syntax errors only show when the pattern first matches.
			_, _, err = pm.MatchesUsingParentResults("x", patternmatcher.MatchInfo{})
		}
		if err != nil {
			return nil, &Error{Dir: dir, File: IgnoreFile, Problem: fmt.Sprintf("pattern %q: %v", p, err)}
		}
	}
	return patternmatcher.New(patterns)
}

// List returns the regular files under dir that no pattern leaves out, in lexical order of
// their paths. A symbolic link, device or socket that is not left out is an error (the
// server refuses links, and a link would hash differently from what the build sees).
func List(dir string) ([]File, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, &Error{Dir: dir, Problem: fmt.Sprintf("cannot read it: %v", err)}
	}
	if !info.IsDir() {
		return nil, &Error{Dir: dir, Problem: "not a folder; give the folder of the function's source (or, in Terraform, a prepared zip as code_path)"}
	}
	pm, err := matcher(dir)
	if err != nil {
		return nil, err
	}
	var (
		files []File
		total int64
		// parents holds each walked folder's match results, for its entries.
		parents = map[string]patternmatcher.MatchInfo{}
	)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		ignored, info, err := pm.MatchesUsingParentResults(rel, parents[path.Dir(rel)])
		if err != nil {
			return &Error{Dir: dir, File: IgnoreFile, Problem: err.Error()}
		}
		switch {
		case d.IsDir() && ignored && !pm.Exclusions():
			return filepath.SkipDir
		case d.IsDir():
			// An ignored folder is still walked when a `!` pattern may take a path in it back.
			parents[rel] = info
			return nil
		case ignored:
			return nil
		case !d.Type().IsRegular():
			return &Error{Dir: dir, File: rel, Problem: "not a regular file (a symbolic link or device); copy the target into the folder, or list it in " + IgnoreFile}
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if total += fi.Size(); total > MaxBytes {
			return &Error{Dir: dir, Problem: fmt.Sprintf("more than %d MiB of files; keep build outputs and dependencies out of it (%s)", MaxBytes>>20, IgnoreFile)}
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
		return nil, &Error{Dir: dir, Problem: "no files to upload; put the handler source in it (or check " + IgnoreFile + ")"}
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

// Zip returns the deflated zip of dir's files with fixed timestamps and modes (0644, 0755
// for executables), and how many files it holds.
func Zip(dir string) ([]byte, int, error) {
	files, err := List(dir)
	if err != nil {
		return nil, 0, err
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
			return nil, 0, fmt.Errorf("zip %s: %w", f.Name, err)
		}
		if _, err := copyFile(w, f.path); err != nil {
			return nil, 0, &Error{Dir: dir, File: f.Name, Problem: err.Error()}
		}
	}
	if err := zw.Close(); err != nil {
		return nil, 0, fmt.Errorf("zip %s: %w", dir, err)
	}
	return buf.Bytes(), len(files), nil
}

func copyFile(w io.Writer, path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(w, f)
}
