package buildkit

import (
	"fmt"
	"path"
	"strings"
	"time"

	"sless.dev/sless/rules"
)

// Object keys (SPEC: functions/{ns}/{name}/{ts}.zip, contexts/{ns}/{name}/{ts}.tar.gz).
const (
	zipPrefix     = "functions/"
	contextPrefix = "contexts/"
	// TimestampLayout sorts lexically in time order, so the newest key is the last one listed.
	TimestampLayout = "20060102T150405.000000000Z"
)

// Timestamp formats t for an object key.
func Timestamp(t time.Time) string { return t.UTC().Format(TimestampLayout) }

// ZipKey is where an upload's original zip is stored.
func ZipKey(ns, name, ts string) string { return zipPrefix + ns + "/" + name + "/" + ts + ".zip" }

// ContextKey is where an upload's build context is stored.
func ContextKey(ns, name, ts string) string {
	return contextPrefix + ns + "/" + name + "/" + ts + ".tar.gz"
}

// functionPrefixes are all key prefixes holding one function's artifacts.
func functionPrefixes(ns, name string) []string {
	return []string{zipPrefix + ns + "/" + name + "/", contextPrefix + ns + "/" + name + "/"}
}

// KanikoSpec is what a cluster build needs to build one function image.
type KanikoSpec struct {
	// ContextKey is the build context's key in the artifact store (the build's fetch step
	// reads it; kaniko gets it as a file).
	ContextKey string
	// Dockerfile is the Dockerfile path inside the context, for --dockerfile.
	Dockerfile string
	// Destination is the image reference the build's push step pushes to:
	// {registry}/{ns}/{name}:{tag}, never outside {registry}/{ns}/.
	Destination string
	// Tag is Destination's tag, derived from the context hash.
	Tag string
}

// NewKanikoSpec describes the build of the context stored at contextKey, whose content hash
// is hash, into registry (host[:port][/path]) as {registry}/{ns}/{name}:{tag}. ns and name
// must be DNS labels (as every namespace and Function name is), so the image lands in the
// namespace's own repositories whatever they are.
func NewKanikoSpec(contextKey, hash, registry, ns, name string) (KanikoSpec, error) {
	if contextKey == "" || registry == "" {
		return KanikoSpec{}, fmt.Errorf("kaniko spec for %s/%s: context key and registry are required", ns, name)
	}
	for _, n := range []string{ns, name} {
		if err := rules.CheckName(n); err != nil {
			return KanikoSpec{}, fmt.Errorf("kaniko spec for %s/%s: %w", ns, name, err)
		}
	}
	if len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" {
		return KanikoSpec{}, fmt.Errorf("kaniko spec for %s/%s: context hash %q is not a sha256 hex digest", ns, name, hash)
	}
	tag := ImageTag(hash)
	return KanikoSpec{
		ContextKey:  contextKey,
		Dockerfile:  DockerfilePath,
		Destination: ImageRepository(registry, ns, name) + ":" + tag,
		Tag:         tag,
	}, nil
}

// ImageRepository is the repository a function's images are pushed to.
func ImageRepository(registry, ns, name string) string {
	return path.Join(strings.TrimSuffix(registry, "/"), ns, name)
}
