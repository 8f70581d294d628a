package buildkit

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// A cluster build writes its image as an OCI layout (kaniko --no-push) on a volume it shares
// with the step that pushes it. kaniko ran the tenant's install steps as root on that volume,
// so whatever lies there is the tenant's to shape: a symbolic link planted where a blob goes
// would make the push step — which holds the registry credential — read the file it points at
// and send it to the registry. The push step therefore reads only directories and regular
// files, and only after kaniko has exited.

// LayoutError refuses a layout that holds something other than directories and regular
// files; Path is relative to the layout.
type LayoutError struct {
	Path string
	Mode fs.FileMode
}

func (e *LayoutError) Error() string {
	what := "a special file"
	switch t := e.Mode.Type(); {
	case t&fs.ModeSymlink != 0:
		what = "a symbolic link"
	case t&fs.ModeNamedPipe != 0:
		what = "a named pipe"
	case t&fs.ModeSocket != 0:
		what = "a socket"
	case t&fs.ModeDevice != 0:
		what = "a device"
	}
	return fmt.Sprintf("the build's output is not a plain OCI layout: %s is %s, which a build step may have planted "+
		"to make the push read another file; nothing was pushed", e.Path, what)
}

// CheckLayout returns a *LayoutError for the first entry under dir (dir included) that is
// neither a directory nor a regular file. Symbolic links are never followed.
func CheckLayout(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("reading the build's output: %w", err)
		}
		if d.IsDir() || d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		return &LayoutError{Path: filepath.ToSlash(filepath.Join(filepath.Base(dir), rel)), Mode: d.Type()}
	})
}

// PushLayout pushes the one image of the OCI layout at dir to dest and returns it by digest
// (dest's repository @ the manifest's digest). The layout is checked first (CheckLayout);
// opts carry the registry's credentials and transport.
func PushLayout(ctx context.Context, dir string, dest name.Tag, opts ...remote.Option) (name.Digest, error) {
	if err := CheckLayout(dir); err != nil {
		return name.Digest{}, err
	}
	img, digest, err := layoutImage(dir)
	if err != nil {
		return name.Digest{}, err
	}
	if err := remote.Write(dest, img, append(opts, remote.WithContext(ctx))...); err != nil {
		return name.Digest{}, fmt.Errorf("pushing %s: %w", dest, err)
	}
	return dest.Context().Digest(digest.String()), nil
}

// layoutImage is the layout's only image and the digest of its manifest as read (not as
// index.json claims it).
func layoutImage(dir string) (v1.Image, v1.Hash, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("the build's output is not an OCI layout: %w", err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("the build's output: %w", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("the build's output: index.json: %w", err)
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsImage() {
		return nil, v1.Hash{}, fmt.Errorf("the build's output holds %d manifests, want one image", len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("the build's output: %w", err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("the build's output: manifest: %w", err)
	}
	digest, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, v1.Hash{}, err
	}
	if digest != m.Manifests[0].Digest {
		return nil, v1.Hash{}, fmt.Errorf("the build's output is inconsistent: index.json names manifest %s, its blob is %s", m.Manifests[0].Digest, digest)
	}
	return img, digest, nil
}
