package buildkit

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
)

// Artifacts stores and retrieves one platform's uploads on top of a Store.
type Artifacts struct {
	Store  Store
	Limits Limits // applied when stored zips are read back; DefaultLimits when zero
}

// Upload locates one stored upload.
type Upload struct {
	ZipKey     string
	ContextKey string // Function.spec.source
	Hash       string // content hash of the build context
	ImageTag   string
}

// SaveUpload stores the original zip and its build context under the same timestamp.
func (a Artifacts) SaveUpload(ctx context.Context, ns, name string, now time.Time, zipData []byte, bc *BuildContext) (Upload, error) {
	ctx, span := tracer.Start(ctx, "buildkit.SaveUpload")
	defer span.End()
	span.SetAttributes(attribute.String("sless.namespace", ns), attribute.String("sless.function", name))
	ts := Timestamp(now)
	up := Upload{ZipKey: ZipKey(ns, name, ts), ContextKey: ContextKey(ns, name, ts), Hash: bc.Hash, ImageTag: bc.ImageTag()}
	if err := a.Store.Put(ctx, up.ZipKey, bytes.NewReader(zipData), int64(len(zipData)), "application/zip"); err != nil {
		recordError(span, err)
		return Upload{}, fmt.Errorf("saving the upload of %s/%s: %w", ns, name, err)
	}
	if err := a.Store.Put(ctx, up.ContextKey, bytes.NewReader(bc.Data), int64(len(bc.Data)), "application/gzip"); err != nil {
		recordError(span, err)
		return Upload{}, fmt.Errorf("saving the build context of %s/%s: %w", ns, name, err)
	}
	return up, nil
}

// DeleteFunction removes every artifact of one function (the Function finalizer calls it).
func (a Artifacts) DeleteFunction(ctx context.Context, ns, name string) error {
	ctx, span := tracer.Start(ctx, "buildkit.DeleteFunction")
	defer span.End()
	span.SetAttributes(attribute.String("sless.namespace", ns), attribute.String("sless.function", name))
	if ns == "" || name == "" || strings.Contains(ns+name, "/") {
		return fmt.Errorf("deleting artifacts: invalid function %q/%q", ns, name)
	}
	for _, prefix := range functionPrefixes(ns, name) {
		if _, err := a.Store.DeletePrefix(ctx, prefix); err != nil {
			recordError(span, err)
			return fmt.Errorf("deleting artifacts of %s/%s: %w", ns, name, err)
		}
	}
	return nil
}

// LatestZipKey returns the key of the newest uploaded zip of a function, or ErrNotFound.
func (a Artifacts) LatestZipKey(ctx context.Context, ns, name string) (string, error) {
	objs, err := a.Store.List(ctx, functionPrefixes(ns, name)[0])
	if err != nil {
		return "", err
	}
	for i := len(objs) - 1; i >= 0; i-- {
		if strings.HasSuffix(objs[i].Key, ".zip") {
			return objs[i].Key, nil
		}
	}
	return "", fmt.Errorf("no upload of %s/%s: %w", ns, name, ErrNotFound)
}

// ZipKeyForContext maps a build context key (Function.spec.source) to the zip stored with it.
func ZipKeyForContext(contextKey string) (string, error) {
	rest, ok := strings.CutPrefix(contextKey, contextPrefix)
	if !ok || !strings.HasSuffix(rest, ".tar.gz") {
		return "", fmt.Errorf("%q is not a build context key (%s{ns}/{name}/{ts}.tar.gz)", contextKey, contextPrefix)
	}
	return zipPrefix + strings.TrimSuffix(rest, ".tar.gz") + ".zip", nil
}

// OpenSource reads a stored upload back for the console: the user's files exactly as
// uploaded, without anything the build generated.
func (a Artifacts) OpenSource(ctx context.Context, zipKey string) (*Archive, error) {
	ctx, span := tracer.Start(ctx, "buildkit.OpenSource")
	defer span.End()
	lim := a.Limits
	if lim == (Limits{}) {
		lim = DefaultLimits()
	}
	rc, err := a.Store.Get(ctx, zipKey)
	if err != nil {
		recordError(span, err)
		return nil, err
	}
	defer rc.Close()
	data, err := ReadUpload(rc, lim)
	if err != nil {
		recordError(span, err)
		return nil, fmt.Errorf("reading stored upload %s: %w", zipKey, err)
	}
	arch, err := OpenArchive(bytes.NewReader(data), int64(len(data)), lim)
	if err != nil {
		recordError(span, err)
		return nil, fmt.Errorf("opening stored upload %s: %w", zipKey, err)
	}
	return arch, nil
}
