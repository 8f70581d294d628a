package buildkit

import (
	"fmt"
	"path"
	"strings"
	"time"
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

// KanikoSpec is what the kaniko Job needs to build one function image.
type KanikoSpec struct {
	// Context is the build context URL for --context, e.g. s3://bucket/contexts/ns/fn/ts.tar.gz.
	Context string
	// Dockerfile is the Dockerfile path inside the context, for --dockerfile.
	Dockerfile string
	// Destination is the image reference to push, for --destination.
	Destination string
	// Tag is Destination's tag, derived from the context hash.
	Tag string
}

// Args are the kaniko executor arguments for the spec.
func (k KanikoSpec) Args() []string {
	return []string{"--context=" + k.Context, "--dockerfile=" + k.Dockerfile, "--destination=" + k.Destination,
		"--reproducible"}
}

// NewKanikoSpec describes the build of the context stored at contextKey in bucket, whose
// content hash is hash, into registry (host[:port][/path]) as {registry}/{ns}/{name}:{tag}.
func NewKanikoSpec(bucket, contextKey, hash, registry, ns, name string) (KanikoSpec, error) {
	if bucket == "" || contextKey == "" || registry == "" || ns == "" || name == "" {
		return KanikoSpec{}, fmt.Errorf("kaniko spec for %s/%s: bucket, context key, registry, namespace and name are required", ns, name)
	}
	if len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" {
		return KanikoSpec{}, fmt.Errorf("kaniko spec for %s/%s: context hash %q is not a sha256 hex digest", ns, name, hash)
	}
	tag := ImageTag(hash)
	return KanikoSpec{
		Context:     "s3://" + bucket + "/" + contextKey,
		Dockerfile:  DockerfilePath,
		Destination: ImageRepository(registry, ns, name) + ":" + tag,
		Tag:         tag,
	}, nil
}

// ImageRepository is the repository a function's images are pushed to.
func ImageRepository(registry, ns, name string) string {
	return path.Join(strings.TrimSuffix(registry, "/"), ns, name)
}
