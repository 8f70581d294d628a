package buildkit

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// writeLayout writes a random image as kaniko --oci-layout-path does and returns the layout's
// directory and the path of one of its layer blobs.
func writeLayout(t *testing.T) (dir, layerBlob string) {
	t.Helper()
	img, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(t.TempDir(), "image")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Join(dir, "blobs", d.Algorithm, d.Hex)
}

// TestPushLayoutRefusesPlantedEntries: the push step reads what a tenant's build steps could
// write, holding the registry credential; every kind of entry other than a directory or a
// regular file — wherever it lies in the layout, the layout itself included — is refused
// before anything is read or sent, and the error says so. A plain layout is pushed and
// answered by the digest the registry holds for the tag.
func TestPushLayoutRefusesPlantedEntries(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	credential := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(credential, []byte(`{"auths":{"registry":{"auth":"c2VjcmV0"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		plant func(t *testing.T, dir, blob string) string // returns the planted path
		want  string
	}{
		"a layer blob linked to the credential": {want: "a symbolic link", plant: func(t *testing.T, dir, blob string) string {
			return replace(t, blob, func(p string) error { return os.Symlink(credential, p) })
		}},
		"index.json linked to the credential": {want: "a symbolic link", plant: func(t *testing.T, dir, _ string) string {
			return replace(t, filepath.Join(dir, "index.json"), func(p string) error { return os.Symlink(credential, p) })
		}},
		"the blobs directory linked elsewhere": {want: "a symbolic link", plant: func(t *testing.T, dir, _ string) string {
			blobs := filepath.Join(dir, "blobs")
			if err := os.Rename(blobs, blobs+".real"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(blobs+".real", blobs); err != nil {
				t.Fatal(err)
			}
			return blobs
		}},
		"the layout itself a link": {want: "a symbolic link", plant: func(t *testing.T, dir, _ string) string {
			if err := os.Rename(dir, dir+".real"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(dir+".real", dir); err != nil {
				t.Fatal(err)
			}
			return dir
		}},
		"a named pipe as a blob (a push that would wait for ever)": {want: "named pipe", plant: func(t *testing.T, _, blob string) string {
			return replace(t, blob, func(p string) error { return syscall.Mkfifo(p, 0o644) })
		}},
		"a Unix socket beside the blobs": {want: "socket", plant: func(t *testing.T, dir, _ string) string {
			p := filepath.Join(dir, "blobs", "sock")
			l, err := net.Listen("unix", p) // a listener makes the socket file without privileges
			if err != nil {
				t.Fatalf("listen on %s: %v", p, err)
			}
			t.Cleanup(func() { l.Close() })
			return p
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir, blob := writeLayout(t)
			planted := tc.plant(t, dir, blob)
			dest := tag(t, reg.URL, "tenant-a/fn:"+strings.ReplaceAll(name, " ", "-")[:20])
			_, err := PushLayout(context.Background(), dir, dest)
			var le *LayoutError
			if !errors.As(err, &le) {
				t.Fatalf("PushLayout = %v, want a *LayoutError", err)
			}
			rel, _ := filepath.Rel(filepath.Dir(dir), planted)
			if le.Path != rel || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing was pushed") {
				t.Errorf("error %q (path %s), want it to name %s as %s", err, le.Path, rel, tc.want)
			}
			if _, err := remote.Head(dest); err == nil {
				t.Errorf("%s was pushed", dest)
			}
		})
	}

	t.Run("a plain layout is pushed by digest", func(t *testing.T) {
		dir, _ := writeLayout(t)
		dest := tag(t, reg.URL, "tenant-a/fn:sha-1")
		got, err := PushLayout(context.Background(), dir, dest)
		if err != nil {
			t.Fatal(err)
		}
		d, err := remote.Head(dest)
		if err != nil {
			t.Fatal(err)
		}
		if want := dest.Context().Digest(d.Digest.String()); got != want {
			t.Errorf("PushLayout = %s, the registry holds %s", got, want)
		}
	})

	t.Run("index.json naming another manifest", func(t *testing.T) {
		dir, _ := writeLayout(t)
		other, _ := writeLayout(t)
		// The other layout's index over this one's blobs: the manifest it names is not here,
		// or, copied in, not the one index.json claims — either way nothing is pushed.
		b, err := os.ReadFile(filepath.Join(other, "index.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "index.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		dest := tag(t, reg.URL, "tenant-a/fn:other")
		if _, err := PushLayout(context.Background(), dir, dest); err == nil {
			t.Fatal("pushed a layout whose index names a manifest it does not hold")
		}
	})
}

// replace removes path and creates another entry there with mk; it returns path.
func replace(t *testing.T, path string, mk func(string) error) string {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := mk(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func tag(t *testing.T, url, repo string) name.Tag {
	t.Helper()
	tg, err := name.NewTag(strings.TrimPrefix(url, "http://")+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}
