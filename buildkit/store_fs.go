package buildkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.opentelemetry.io/otel/attribute"
)

// FSStore keeps artifacts as files under a root directory (`sless dev`): key a/b/c is the
// file root/a/b/c.
type FSStore struct {
	root string
}

var _ Store = (*FSStore)(nil)

// NewFSStore returns a store rooted at dir.
func NewFSStore(dir string) (*FSStore, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("artifact directory %q: %w", dir, err)
	}
	return &FSStore{root: abs}, nil
}

func (s *FSStore) path(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	return filepath.Join(s.root, filepath.FromSlash(key)), nil
}

// EnsureBucket creates the root directory.
func (s *FSStore) EnsureBucket(ctx context.Context) error {
	if err := os.MkdirAll(s.root, 0o755); err != nil {
		return fmt.Errorf("creating artifact directory %s: %w", s.root, err)
	}
	return nil
}

// Put writes the object atomically (temporary file + rename): readers never see half a file.
func (s *FSStore) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (err error) {
	_, span := tracer.Start(ctx, "buildkit.FSStore.Put")
	defer span.End()
	span.SetAttributes(attribute.String("sless.key", key))
	defer func() {
		if err != nil {
			recordError(span, err)
		}
	}()
	p, err := s.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("storing %s: %w", key, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".put-*")
	if err != nil {
		return fmt.Errorf("storing %s: %w", key, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	n, err := io.Copy(tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil && size >= 0 && n != size {
		err = fmt.Errorf("got %d bytes, expected %d", n, size)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		return fmt.Errorf("storing %s: %w", key, err)
	}
	return nil
}

// Get opens the object.
func (s *FSStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("getting %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("getting %s: %w", key, err)
	}
	return f, nil
}

// List walks the directory that holds prefix.
func (s *FSStore) List(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	err := s.walkPrefix(prefix, func(key string, info fs.FileInfo) error {
		out = append(out, Object{Key: key, Size: info.Size(), LastModified: info.ModTime()})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, err
}

// DeletePrefix removes the matching files and the directories left empty.
func (s *FSStore) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	_, span := tracer.Start(ctx, "buildkit.FSStore.DeletePrefix")
	defer span.End()
	n := 0
	dirs := map[string]bool{}
	err := s.walkPrefix(prefix, func(key string, info fs.FileInfo) error {
		p := filepath.Join(s.root, filepath.FromSlash(key))
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("deleting %s: %w", key, err)
		}
		dirs[filepath.Dir(p)] = true
		n++
		return nil
	})
	for dir := range dirs {
		for d := dir; d != s.root && strings.HasPrefix(d, s.root); d = filepath.Dir(d) {
			if os.Remove(d) != nil { // not empty (or gone): stop climbing
				break
			}
		}
	}
	if err != nil {
		recordError(span, err)
	}
	return n, err
}

// walkPrefix calls fn for every regular file whose key starts with prefix.
func (s *FSStore) walkPrefix(prefix string, fn func(key string, info fs.FileInfo) error) error {
	if prefix != "" {
		if err := checkKey(strings.TrimSuffix(prefix, "/")); err != nil {
			return err
		}
	}
	// Walk from the deepest directory the prefix names completely.
	start := s.root
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = filepath.Join(s.root, filepath.FromSlash(prefix[:i]))
	}
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), ".put-") {
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return fn(key, info)
	})
	if err != nil {
		return fmt.Errorf("listing %q under %s: %w", prefix, s.root, err)
	}
	return nil
}
