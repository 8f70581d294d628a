package buildkit

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
)

// Limits caps what an upload may contain; zero values are not "unlimited", use DefaultLimits.
type Limits struct {
	MaxZipBytes          int64 // compressed upload size; default 50 MiB
	MaxUncompressedBytes int64 // sum of all entries; default 250 MiB
	MaxEntries           int   // files and directories; default 10,000
	// MaxCompressionRatio caps uncompressed/compressed per entry of at least RatioMinBytes
	// (small files legitimately compress extremely well); default 100 over 1 MiB.
	MaxCompressionRatio float64
	RatioMinBytes       int64
}

// DefaultLimits returns the platform defaults.
func DefaultLimits() Limits {
	return Limits{
		MaxZipBytes:          50 << 20,
		MaxUncompressedBytes: 250 << 20,
		MaxEntries:           10_000,
		MaxCompressionRatio:  100,
		RatioMinBytes:        1 << 20,
	}
}

// Archive is a zip whose structure passed validation: regular files only, safe unique names,
// sizes within limits. File contents are read (and CRC-checked) on demand.
type Archive struct {
	Files []File // sorted by Name
	index map[string]int
}

// File is one regular file of an Archive.
type File struct {
	Name       string // cleaned, slash-separated, relative
	Size       int64  // uncompressed
	Executable bool
	zf         *zip.File
}

// Open returns the file's contents; a read error wraps a *ValidationError (RuleCorrupt)
// when the data does not match the zip's declared size or checksum.
func (f File) Open() (io.ReadCloser, error) {
	rc, err := f.zf.Open()
	if err != nil {
		return nil, corrupt(f.Name, err)
	}
	return &checkedReader{rc: rc, name: f.Name}, nil
}

// ReadAll returns the file's contents, at most max+1 bytes (so a caller can tell a file
// longer than max without reading it all).
func (f File) ReadAll(max int64) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, max+1))
}

// checkedReader turns archive/zip's size and checksum errors into validation errors.
type checkedReader struct {
	rc   io.ReadCloser
	name string
}

func (c *checkedReader) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	if err != nil && err != io.EOF {
		err = corrupt(c.name, err)
	}
	return n, err
}

func (c *checkedReader) Close() error { return c.rc.Close() }

func corrupt(name string, err error) error {
	return fmt.Errorf("reading %s: %w: %w", name, &ValidationError{Rule: RuleCorrupt,
		Reason: "the entry's data is damaged (" + err.Error() + ")", File: name,
		Fix: "re-create the zip and upload it again"}, err)
}

// ReadFile returns the contents of the named file.
func (a *Archive) ReadFile(name string) ([]byte, error) {
	f, ok := a.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("file %q: %w", name, fs.ErrNotExist)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	buf := bytes.NewBuffer(make([]byte, 0, f.Size))
	_, err = io.Copy(buf, rc)
	return buf.Bytes(), err
}

// Lookup finds a file by its cleaned name.
func (a *Archive) Lookup(name string) (File, bool) {
	i, ok := a.index[name]
	if !ok {
		return File{}, false
	}
	return a.Files[i], true
}

// ReadUpload reads an upload body, refusing more than lim.MaxZipBytes without buffering it.
func ReadUpload(r io.Reader, lim Limits) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, lim.MaxZipBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the upload: %w", err)
	}
	if int64(len(data)) > lim.MaxZipBytes {
		return nil, zipTooLarge(lim)
	}
	return data, nil
}

func zipTooLarge(lim Limits) error {
	return &ValidationError{Rule: RuleZipTooLarge,
		Reason: fmt.Sprintf("the zip is larger than %d bytes", lim.MaxZipBytes),
		Fix:    "leave build outputs, dependencies (node_modules, vendor, .venv) and data files out of the zip"}
}

// OpenArchive checks a zip's structure against lim without decompressing it.
func OpenArchive(r io.ReaderAt, size int64, lim Limits) (*Archive, error) {
	if size > lim.MaxZipBytes {
		return nil, zipTooLarge(lim)
	}
	zr, err := zip.NewReader(r, size)
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) { // insecure names get our own, clearer errors
		return nil, &ValidationError{Rule: RuleNotZip, Reason: "the upload is not a readable zip archive (" + err.Error() + ")",
			Fix: "upload a .zip file created with zip, 7-Zip or your IDE's export"}
	}
	if len(zr.File) > lim.MaxEntries {
		return nil, &ValidationError{Rule: RuleTooManyEntries,
			Reason: fmt.Sprintf("the zip has %d entries, more than the limit of %d", len(zr.File), lim.MaxEntries),
			Fix:    "leave dependency folders (node_modules, vendor, .venv) out; they are installed during the build"}
	}
	a := &Archive{index: make(map[string]int, len(zr.File))}
	dirs := map[string]bool{}
	var total uint64
	for _, zf := range zr.File {
		name, isDir, err := checkEntry(zf, lim)
		if err != nil {
			return nil, err
		}
		if isDir {
			dirs[name] = true
			continue
		}
		if _, dup := a.index[name]; dup {
			return nil, duplicate(name, "the zip contains this file twice")
		}
		total += zf.UncompressedSize64
		if total > uint64(lim.MaxUncompressedBytes) {
			return nil, &ValidationError{Rule: RuleUncompressedTooLarge, File: name,
				Reason: fmt.Sprintf("the files add up to more than %d bytes uncompressed", lim.MaxUncompressedBytes),
				Fix:    "leave build outputs, dependencies and data files out of the zip"}
		}
		a.index[name] = len(a.Files)
		a.Files = append(a.Files, File{Name: name, Size: int64(zf.UncompressedSize64), Executable: zf.Mode()&0o111 != 0, zf: zf})
	}
	if err := checkFileDirConflicts(a, dirs); err != nil {
		return nil, err
	}
	sort.Slice(a.Files, func(i, j int) bool { return a.Files[i].Name < a.Files[j].Name })
	for i, f := range a.Files {
		a.index[f.Name] = i
	}
	return a, nil
}

// checkEntry validates one entry's name, type, method and ratio; it returns the cleaned name.
func checkEntry(zf *zip.File, lim Limits) (string, bool, error) {
	raw := zf.Name
	if err := checkName(raw); err != nil {
		return "", false, err
	}
	mode := zf.Mode()
	isDir := mode.IsDir() || strings.HasSuffix(raw, "/")
	name := path.Clean(strings.TrimSuffix(raw, "/"))
	switch {
	case mode&fs.ModeSymlink != 0:
		return "", false, &ValidationError{Rule: RuleSymlink, File: raw, Reason: "symbolic links are not allowed",
			Fix: "replace the link with the file it points to (zip -r without -y follows links)"}
	case mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeIrregular) != 0:
		return "", false, &ValidationError{Rule: RuleSpecialFile, File: raw, Reason: "device files, pipes and sockets are not allowed",
			Fix: "zip only regular files and directories"}
	case isDir:
		return name, true, nil
	case zf.Flags&0x1 != 0:
		return "", false, &ValidationError{Rule: RuleUnsupportedEntry, File: raw, Reason: "the entry is encrypted",
			Fix: "create the zip without a password"}
	case zf.Method != zip.Store && zf.Method != zip.Deflate:
		return "", false, &ValidationError{Rule: RuleUnsupportedEntry, File: raw,
			Reason: fmt.Sprintf("compression method %d is not supported", zf.Method), Fix: "use the standard deflate compression"}
	}
	if zf.UncompressedSize64 >= uint64(lim.RatioMinBytes) &&
		float64(zf.UncompressedSize64) > lim.MaxCompressionRatio*float64(zf.CompressedSize64) {
		return "", false, &ValidationError{Rule: RuleCompressionRatio, File: raw,
			Reason: fmt.Sprintf("the entry expands from %d to %d bytes, beyond the %.0f:1 compression ratio cap (zip bomb protection)",
				zf.CompressedSize64, zf.UncompressedSize64, lim.MaxCompressionRatio),
			Fix: "leave generated or padded data files out of the zip"}
	}
	return name, false, nil
}

func checkName(raw string) error {
	invalid := func(reason string) error {
		return &ValidationError{Rule: RuleInvalidName, File: raw, Reason: reason,
			Fix: "rename the file to a UTF-8 name with / separators and re-create the zip"}
	}
	switch {
	case raw == "" || raw == "/":
		return invalid("the entry has an empty name")
	case !utf8.ValidString(raw):
		return invalid("the name is not valid UTF-8")
	case strings.ContainsAny(raw, "\x00\\"):
		return invalid("the name contains a NUL byte or a backslash")
	case strings.HasPrefix(raw, "/") || (len(raw) >= 2 && raw[1] == ':'):
		return &ValidationError{Rule: RuleAbsolutePath, File: raw, Reason: "absolute paths are not allowed",
			Fix: "zip the files relative to the function's directory"}
	}
	for _, part := range strings.Split(raw, "/") {
		if part == ".." {
			return &ValidationError{Rule: RuleParentPath, File: raw, Reason: "paths may not contain .. components",
				Fix: "zip the files relative to the function's directory"}
		}
	}
	if path.Clean(strings.TrimSuffix(raw, "/")) == "." {
		return invalid("the entry names the archive root")
	}
	return nil
}

func duplicate(name, reason string) error {
	return &ValidationError{Rule: RuleDuplicateName, File: name, Reason: reason,
		Fix: "re-create the zip so that every path appears once"}
}

// checkFileDirConflicts rejects a path that is a file and also a directory ("a" and "a/b").
func checkFileDirConflicts(a *Archive, dirs map[string]bool) error {
	for _, f := range a.Files {
		if dirs[f.Name] {
			return duplicate(f.Name, "the name is both a file and a directory")
		}
		for dir := path.Dir(f.Name); dir != "."; dir = path.Dir(dir) {
			if _, isFile := a.index[dir]; isFile {
				return duplicate(dir, "the name is both a file and a directory")
			}
		}
	}
	return nil
}

// Source is a validated upload for one runtime: a safe Archive that has the runtime's entry
// point.
type Source struct {
	*Archive
	Runtime    Runtime
	Entrypoint string // resolved: the runtime default when none was given
	// goSignature is how the Go entry function is called (1 or 2 parameters).
	goParams int
	// goVersion is the go directive for go.work; goModule the user's module path ("" without
	// a go.mod).
	goVersion string
	goModule  string
}

// Validate checks an uploaded zip for runtime (a name from Runtimes) and entrypoint (empty
// means the runtime's default). Every rejection is a *ValidationError.
func Validate(ctx context.Context, r io.ReaderAt, size int64, runtime, entrypoint string, lim Limits) (*Source, error) {
	_, span := tracer.Start(ctx, "buildkit.Validate")
	defer span.End()
	span.SetAttributes(attribute.String("sless.runtime", runtime), attribute.Int64("sless.zip_bytes", size))
	src, err := validate(r, size, runtime, entrypoint, lim)
	if err != nil {
		recordError(span, err)
		return nil, err
	}
	span.SetAttributes(attribute.Int("sless.files", len(src.Files)))
	return src, nil
}

// ValidateBytes is Validate for an upload held in memory.
func ValidateBytes(ctx context.Context, zipData []byte, runtime, entrypoint string, lim Limits) (*Source, error) {
	return Validate(ctx, bytes.NewReader(zipData), int64(len(zipData)), runtime, entrypoint, lim)
}

func validate(r io.ReaderAt, size int64, runtime, entrypoint string, lim Limits) (*Source, error) {
	rt, err := LookupRuntime(runtime)
	if err != nil {
		return nil, err
	}
	if entrypoint, err = NormalizeEntrypoint(runtime, entrypoint); err != nil {
		return nil, err
	}
	a, err := OpenArchive(r, size, lim)
	if err != nil {
		return nil, err
	}
	src := &Source{Archive: a, Runtime: rt, Entrypoint: entrypoint}
	switch rt.Language {
	case LanguageGo:
		err = checkGoSource(src)
	case LanguagePython:
		err = checkPythonSource(src)
	case LanguageNode:
		err = checkNodeSource(src)
	}
	if err != nil {
		return nil, err
	}
	return src, nil
}
