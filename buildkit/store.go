package buildkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// ErrNotFound is returned (wrapped) when an object does not exist.
var ErrNotFound = errors.New("object not found")

// Store keeps build artifacts under slash-separated keys. S3Store and FSStore implement it.
type Store interface {
	EnsureBucket(ctx context.Context) error
	Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns the objects whose keys start with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]Object, error)
	// DeletePrefix removes every object whose key starts with prefix and reports how many.
	DeletePrefix(ctx context.Context, prefix string) (int, error)
}

// Object is one stored object.
type Object struct {
	Key          string
	Size         int64
	LastModified time.Time
}

// checkKey rejects keys that could escape a prefix or a directory.
func checkKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || strings.Contains(key, "\\") || strings.Contains(key, "\x00") {
		return fmt.Errorf("object key %q: want a relative slash-separated key", key)
	}
	for _, part := range strings.Split(key, "/") {
		if part == "." || part == ".." {
			return fmt.Errorf("object key %q: . and .. components are not allowed", key)
		}
	}
	return nil
}
