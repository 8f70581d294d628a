// Package buildkit turns an uploaded zip into something runnable: it validates the upload,
// generates a deterministic build context (tar.gz with a Dockerfile) per runtime, stores
// artifacts (S3 or the local filesystem), describes the kaniko build, and builds functions
// locally for `sless dev`.
package buildkit

import (
	"fmt"
	"sort"
	"strings"

	"sless.dev/sless/rules"
)

// Language is the family of a runtime; it selects the wrapper and the Dockerfile.
type Language string

// Supported languages.
const (
	LanguageGo     Language = "go"
	LanguagePython Language = "python"
	LanguageNode   Language = "node"
)

// Runtime describes one supported runtime. The control plane renders probes and ports from
// it; buildkit renders Dockerfiles and local builds from it.
type Runtime struct {
	Name     string   // as written in Function.spec.runtime, e.g. "python3.11"
	Language Language //
	// Version is the language version: the go directive of generated go.mod/go.work files,
	// informative for the others.
	Version string
	// BaseImage runs the function; BuilderImage compiles it (Go only). Versioned tags only.
	BaseImage    string
	BuilderImage string
	// DefaultEntrypoint is used when Function.spec.entrypoint is empty: "handler.handle" means
	// module/file handler, function handle; for Go it is the exported function name.
	DefaultEntrypoint string
	HealthPath        string // GET path answering 200 when the wrapper is ready
	Port              int32  // container port; the wrapper reads it from $PORT
}

// Wrapper contract shared by all runtimes (runtimes/README.md).
const (
	HealthPath  = rules.HealthPath
	DefaultPort = 8080
)

// Runtimes is the table of supported runtimes, keyed by name.
var Runtimes = map[string]Runtime{
	"go1.23":     goRuntime("go1.23", "1.23", "golang:1.23.12-alpine"),
	"go1.25":     goRuntime("go1.25", "1.25", "golang:1.25.3-alpine"),
	"python3.11": scriptRuntime("python3.11", LanguagePython, "3.11", "python:3.11.13-slim-bookworm"),
	"python3.12": scriptRuntime("python3.12", LanguagePython, "3.12", "python:3.12.11-slim-bookworm"),
	"nodejs20":   scriptRuntime("nodejs20", LanguageNode, "20", "node:20.19.4-bookworm-slim"),
	"nodejs22":   scriptRuntime("nodejs22", LanguageNode, "22", "node:22.17.1-bookworm-slim"),
}

func goRuntime(name, version, builder string) Runtime {
	return Runtime{Name: name, Language: LanguageGo, Version: version, BuilderImage: builder,
		BaseImage: "alpine:3.22.1", DefaultEntrypoint: "Handle", HealthPath: HealthPath, Port: DefaultPort}
}

func scriptRuntime(name string, lang Language, version, image string) Runtime {
	return Runtime{Name: name, Language: lang, Version: version, BaseImage: image,
		DefaultEntrypoint: "handler.handle", HealthPath: HealthPath, Port: DefaultPort}
}

// RuntimeNames lists the supported runtime names, sorted.
func RuntimeNames() []string {
	names := make([]string, 0, len(Runtimes))
	for n := range Runtimes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LookupRuntime returns the runtime called name or a *ValidationError listing the choices.
func LookupRuntime(name string) (Runtime, error) {
	rt, ok := Runtimes[name]
	if !ok {
		return Runtime{}, &ValidationError{Rule: RuleUnknownRuntime,
			Reason: fmt.Sprintf("unknown runtime %q", name),
			Fix:    "use one of " + strings.Join(RuntimeNames(), ", ")}
	}
	return rt, nil
}
