package buildkit

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"sless.dev/sless/runtimes"
)

// Layout of every build context.
const (
	DockerfilePath = "Dockerfile" // relative to the context root
	handlerDir     = "handler/"   // the user's files
	serverDir      = "server/"    // the wrapper
	wrapperModule  = "sless/fn/server"
	handlerModule  = "sless/fn/handler"
)

// contextGzipLevel favours speed: a context is transport between the upload and kaniko,
// unpacked once, and the upload response waits for it (docs/benchmarks.md).
const contextGzipLevel = gzip.BestSpeed

// contextModTime is the mtime of every tar entry: a fixed value keeps the hash stable.
var contextModTime = time.Unix(0, 0)

// BuildContext is a deterministic tar.gz holding the user's files, the runtime wrapper and a
// Dockerfile. The same source, runtime and entrypoint always give the same Hash.
type BuildContext struct {
	Data       []byte // tar.gz
	Hash       string // sha256 hex of the uncompressed tar (independent of gzip's output)
	Runtime    Runtime
	Entrypoint string
}

// ImageTag is the image tag built from this context.
func (c *BuildContext) ImageTag() string { return ImageTag(c.Hash) }

// ImageTag derives an image tag from a content hash: "sha-" and the first 16 hex digits
// (64 bits: collisions between one function's builds are not a practical concern).
func ImageTag(hash string) string {
	if len(hash) > 16 {
		hash = hash[:16]
	}
	return "sha-" + hash
}

// entry is one file of a build context.
type entry struct {
	name string
	mode int64
	data []byte // generated files
	file *File  // user files, streamed from the zip
}

// NewBuildContext renders the build context for a validated source.
func NewBuildContext(ctx context.Context, src *Source) (*BuildContext, error) {
	_, span := tracer.Start(ctx, "buildkit.NewBuildContext")
	defer span.End()
	span.SetAttributes(attribute.String("sless.runtime", src.Runtime.Name))
	entries, err := contextEntries(src)
	if err != nil {
		recordError(span, err)
		return nil, err
	}
	bc, err := writeContext(entries, src.sizeHint())
	if err != nil {
		recordError(span, err)
		return nil, fmt.Errorf("writing the %s build context: %w", src.Runtime.Name, err)
	}
	bc.Runtime, bc.Entrypoint = src.Runtime, src.Entrypoint
	span.SetAttributes(attribute.String("sless.context_hash", bc.Hash), attribute.Int("sless.context_bytes", len(bc.Data)))
	return bc, nil
}

func (s *Source) sizeHint() int {
	var n int64
	for _, f := range s.Files {
		n += f.Size
	}
	return int(min(n/2+64<<10, 64<<20))
}

func contextEntries(src *Source) ([]entry, error) {
	lang := string(src.Runtime.Language)
	dockerfile, err := runtimes.FS.ReadFile(lang + "/Dockerfile")
	if err != nil {
		return nil, fmt.Errorf("embedded %s Dockerfile: %w", lang, err)
	}
	args := map[string]string{"BASE_IMAGE": src.Runtime.BaseImage, "HANDLER": src.Entrypoint}
	if src.Runtime.Language == LanguageGo {
		args = map[string]string{"BUILDER_IMAGE": src.Runtime.BuilderImage, "RUNTIME_IMAGE": src.Runtime.BaseImage}
	}
	entries := []entry{{name: DockerfilePath, mode: 0o644, data: setDockerfileArgs(dockerfile, args)}}
	for _, file := range runtimes.Wrapper(lang) {
		data, err := runtimes.FS.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("embedded %s wrapper: %w", lang, err)
		}
		entries = append(entries, entry{name: serverDir + file[strings.LastIndexByte(file, '/')+1:], mode: 0o644, data: data})
	}
	if src.Runtime.Language == LanguageGo {
		entries = append(entries, goWorkspace(src)...)
	}
	for i := range src.Files {
		f := &src.Files[i]
		mode := int64(0o644)
		if f.Executable {
			mode = 0o755
		}
		entries = append(entries, entry{name: handlerDir + f.Name, mode: mode, file: f})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	return entries, nil
}

// setDockerfileArgs rewrites the defaults of "ARG NAME=..." lines; the file stays a plain
// Dockerfile that also builds by hand with --build-arg.
func setDockerfileArgs(dockerfile []byte, args map[string]string) []byte {
	lines := strings.Split(string(dockerfile), "\n")
	for i, line := range lines {
		name, _, ok := strings.Cut(strings.TrimPrefix(line, "ARG "), "=")
		if v, known := args[name]; ok && known && strings.HasPrefix(line, "ARG ") {
			lines[i] = "ARG " + name + "=" + v
		}
	}
	return []byte(strings.Join(lines, "\n"))
}

// goWorkspace generates the files that assemble wrapper and user code (seed 000): go.work
// uses ./server and ./handler, and the generated bind.go imports the user's package by its
// own module path, so any module name works. (A `replace sless/fn/handler => ./handler`
// mapping, as first sketched, compiles the user's root package under a second path and
// breaks its imports of its own internal/ packages.) Without a user go.mod a minimal one
// with module path sless/fn/handler is generated.
func goWorkspace(src *Source) []entry {
	module := src.goModule
	var entries []entry
	if module == "" {
		module = handlerModule
		entries = append(entries, entry{name: handlerDir + "go.mod", mode: 0o644,
			data: []byte("module " + handlerModule + "\n\ngo " + src.Runtime.Version + "\n")})
	}
	call, wants := "handler."+src.Entrypoint+"(event)", "false"
	if src.goParams == 2 {
		call, wants = "handler."+src.Entrypoint+"(event, request)", "true"
	}
	assign := "\twantsRequest = " + wants + "\n\thandle = func(event, request map[string]interface{}) interface{} { return " + call + " }\n"
	if src.goParams == goHTTPForm {
		assign = "\thttpHandler = handler." + src.Entrypoint + "\n"
	}
	bind := "// Code generated by sless buildkit. DO NOT EDIT.\n\npackage main\n\nimport handler " + strconv.Quote(module) + "\n\n" +
		"func init() {\n" + assign + "}\n"
	return append(entries,
		entry{name: serverDir + "bind.go", mode: 0o644, data: []byte(bind)},
		entry{name: serverDir + "go.mod", mode: 0o644, data: []byte("module " + wrapperModule + "\n\ngo " + src.Runtime.Version + "\n")},
		entry{name: "go.work", mode: 0o644, data: []byte("go " + src.goVersion + "\n\nuse ./server\nuse ./handler\n")})
}

func writeContext(entries []entry, sizeHint int) (*BuildContext, error) {
	out := bytes.NewBuffer(make([]byte, 0, sizeHint))
	zw, err := gzip.NewWriterLevel(out, contextGzipLevel)
	if err != nil {
		return nil, err
	}
	hash := newHasher()
	tw := tar.NewWriter(io.MultiWriter(zw, hash))
	for _, e := range entries {
		if err := writeEntry(tw, e); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return &BuildContext{Data: out.Bytes(), Hash: hash.hex()}, nil
}

type hasher struct{ hash.Hash }

func newHasher() hasher { return hasher{sha256.New()} }

func (h hasher) hex() string { return hex.EncodeToString(h.Sum(nil)) }

func writeEntry(tw *tar.Writer, e entry) error {
	size := int64(len(e.data))
	if e.file != nil {
		size = e.file.Size
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: e.mode, Size: size, ModTime: contextModTime, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("tar header for %s: %w", e.name, err)
	}
	if e.file == nil {
		_, err := tw.Write(e.data)
		return err
	}
	rc, err := e.file.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.Copy(tw, rc); err != nil {
		return err
	}
	return nil
}
