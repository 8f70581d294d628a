// Package images serves the tests that build and run real images: a real OCI registry
// (go-containerregistry's) on a listener of the test's choosing, and the base-image stand-ins
// of test/tools/base-images.sh pushed to it under the names the Dockerfiles use.
package images

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Registry is an OCI registry serving on addr, with blobs on disk. It can be stopped and
// started again on the same address with the same content (a registry outage).
type Registry struct {
	// Host is host:port, as image references name it.
	Host    string
	handler http.Handler
	mu      sync.Mutex
	srv     *http.Server
	// push, when set, is the one account that may write (HTTP Basic); reads are anonymous.
	push *authn.Basic
}

// StartRegistry serves a registry on addr ("127.0.0.1:0" picks a port) keeping blobs in dir.
// With push, every request that writes (anything but GET and HEAD) needs its credentials, as
// a registry a platform builds into must (docs/install.md); reads stay anonymous.
func StartRegistry(addr, dir string, push *authn.Basic) (*Registry, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &Registry{push: push}
	reg := registry.New(registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)), registry.Logger(log.New(io.Discard, "", 0)))
	r.handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if push != nil && req.Method != http.MethodGet && req.Method != http.MethodHead {
			if u, p, ok := req.BasicAuth(); !ok || u != push.Username || p != push.Password {
				w.Header().Set("WWW-Authenticate", `Basic realm="sless-test-registry"`)
				http.Error(w, "pushes need credentials", http.StatusUnauthorized)
				return
			}
		}
		reg.ServeHTTP(w, req)
	})
	if err := r.listen(addr); err != nil {
		return nil, err
	}
	return r, nil
}

// Auth is what a client pushes with: the push account, or anonymous.
func (r *Registry) Auth() remote.Option {
	if r.push == nil {
		return remote.WithAuth(authn.Anonymous)
	}
	return remote.WithAuth(r.push)
}

// DockerConfig is a Docker config.json holding the push account for each of hosts (this
// registry's names, host:port), as a kubernetes.io/dockerconfigjson Secret holds it.
func (r *Registry) DockerConfig(hosts ...string) []byte {
	auths := map[string]map[string]string{}
	for _, h := range hosts {
		if r.push != nil {
			auths[h] = map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(r.push.Username + ":" + r.push.Password))}
		}
	}
	b, _ := json.Marshal(map[string]any{"auths": auths})
	return b
}

func (r *Registry) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("registry listener: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Host = ln.Addr().String()
	r.srv = &http.Server{Handler: r.handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return nil
}

// Stop closes the listener and every connection: clients see connection refused.
func (r *Registry) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv != nil {
		_ = r.srv.Close()
		r.srv = nil
	}
}

// Restart serves the same content on the same address again.
func (r *Registry) Restart() error { return r.listen(r.Host) }

// ServeAlso serves the same content on a second address too, one Stop does not close: a
// client of it is not in an outage of Host. stop closes it.
func (r *Registry) ServeAlso(addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("registry listener: %w", err)
	}
	srv := &http.Server{Handler: r.handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

// Ref parses ref (host/path[:tag|@digest]) as served by a plain-HTTP registry.
func Ref(ref string) (name.Reference, error) {
	return name.ParseReference(ref, name.Insecure)
}

// standIns is test/tools/base-images.sh's images.json.
type standIns struct {
	Images []struct {
		Layer      string   `json:"layer"`
		Names      []string `json:"names"`
		Env        []string `json:"env"`
		Cmd        []string `json:"cmd"`
		User       string   `json:"user"`
		WorkingDir string   `json:"workingDir"`
		// Platforms lists the platforms of an index of the same layer (no binaries inside),
		// for builds of several platforms; empty means one linux/amd64 image.
		Platforms []string `json:"platforms"`
	} `json:"images"`
}

// PushStandIns pushes the stand-ins built into dir (test/tools/base-images.sh) to host under
// their names (library/python:3.11.13-slim-bookworm, ...) and returns each name's digest.
// opts carry the registry's credentials.
func PushStandIns(ctx context.Context, dir, host string, opts ...remote.Option) (map[string]v1.Hash, error) {
	b, err := os.ReadFile(filepath.Join(dir, "images.json"))
	if err != nil {
		return nil, fmt.Errorf("base-image stand-ins: %w", err)
	}
	var s standIns
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s/images.json: %w", dir, err)
	}
	digests := map[string]v1.Hash{}
	for _, im := range s.Images {
		layer, err := tarball.LayerFromFile(filepath.Join(dir, im.Layer))
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", im.Layer, err)
		}
		cfg := v1.Config{Env: im.Env, Cmd: im.Cmd, User: im.User, WorkingDir: im.WorkingDir}
		platforms := im.Platforms
		if len(platforms) == 0 {
			platforms = []string{"linux/amd64"}
		}
		var idx v1.ImageIndex = empty.Index
		var single v1.Image
		for _, p := range platforms {
			plat, err := v1.ParsePlatform(p)
			if err != nil {
				return nil, err
			}
			img, err := imageOf(layer, cfg, *plat)
			if err != nil {
				return nil, fmt.Errorf("stand-in %s: %w", im.Names[0], err)
			}
			single = img
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: plat}})
		}
		var artifact interface{ Digest() (v1.Hash, error) } = idx
		opts := append(slices.Clone(opts), remote.WithContext(ctx))
		write := func(ref name.Reference) error { return remote.WriteIndex(ref, idx, opts...) }
		if len(platforms) == 1 {
			artifact = single
			write = func(ref name.Reference) error { return remote.Write(ref, single, opts...) }
		}
		d, err := artifact.Digest()
		if err != nil {
			return nil, fmt.Errorf("stand-in %s: %w", im.Names[0], err)
		}
		for _, n := range im.Names {
			ref, err := Ref(host + "/" + n)
			if err != nil {
				return nil, err
			}
			if err := write(ref); err != nil {
				return nil, fmt.Errorf("pushing stand-in %s: %w", ref, err)
			}
			digests[n] = d
		}
	}
	return digests, nil
}

func imageOf(layer v1.Layer, cfg v1.Config, plat v1.Platform) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant, cf.Config = plat.OS, plat.Architecture, plat.Variant, cfg
	return mutate.ConfigFile(img, cf)
}

// LayerFromDir is one layer holding dir's content with its owners and modes, written by tar
// in a stable order with zero times (the same content gives the same digest).
func LayerFromDir(dir, tmpDir string) (v1.Layer, error) {
	f, err := os.CreateTemp(tmpDir, "layer-*.tar")
	if err != nil {
		return nil, err
	}
	f.Close()
	cmd := exec.Command("tar", "--numeric-owner", "--sort=name", "--mtime=@0", "-C", dir, "-cf", f.Name(), ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("tar of %s: %w: %s", dir, err, out)
	}
	return tarball.LayerFromFile(f.Name())
}

// PushKaniko pushes an executor image laid out as upstream's (/kaniko/executor, its CA
// bundle under /kaniko/ssl, /kaniko/.docker, the same environment and entrypoint) holding
// the executor built by test/tools/kaniko.sh, and returns its reference by digest.
func PushKaniko(ctx context.Context, executor, caBundle, repo, tmpDir string, opts ...remote.Option) (string, error) {
	root := filepath.Join(tmpDir, "kaniko-root")
	for _, d := range []string{"kaniko/ssl/certs", "kaniko/.docker", "workspace"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return "", err
		}
	}
	if err := os.Chmod(filepath.Join(root, "kaniko"), 0o777); err != nil {
		return "", err
	}
	for src, dst := range map[string]string{executor: "kaniko/executor", caBundle: "kaniko/ssl/certs/ca-certificates.crt"} {
		if out, err := exec.Command("cp", src, filepath.Join(root, dst)).CombinedOutput(); err != nil {
			return "", fmt.Errorf("copying %s: %w: %s", src, err, out)
		}
	}
	return pushDir(ctx, root, repo, tmpDir, v1.Config{
		Env: []string{"HOME=/root", "USER=root", "PATH=/usr/local/bin:/kaniko", "SSL_CERT_DIR=/kaniko/ssl/certs",
			"DOCKER_CONFIG=/kaniko/.docker/", "DOCKER_CREDENTIAL_GCR_CONFIG=/kaniko/.config/gcloud/docker_credential_gcr_config.json"},
		Entrypoint: []string{"/kaniko/executor"}, WorkingDir: "/workspace",
	}, opts...)
}

// PushBinary pushes an image holding only the static linux/amd64 binary at /server, its
// entrypoint (a prebuilt image of a user's, as ko would make it from scratch), and returns its
// reference by digest.
func PushBinary(ctx context.Context, binary, repo, tmpDir string, opts ...remote.Option) (string, error) {
	root, err := os.MkdirTemp(tmpDir, "binary-root-")
	if err != nil {
		return "", err
	}
	if out, err := exec.Command("cp", binary, filepath.Join(root, "server")).CombinedOutput(); err != nil {
		return "", fmt.Errorf("copying %s: %w: %s", binary, err, out)
	}
	return pushDir(ctx, root, repo, tmpDir, v1.Config{Entrypoint: []string{"/server"}, WorkingDir: "/"}, opts...)
}

// pushDir pushes a linux/amd64 image of one layer, dir's content, with cfg as repo, and
// returns its reference by digest.
func pushDir(ctx context.Context, dir, repo, tmpDir string, cfg v1.Config, opts ...remote.Option) (string, error) {
	layer, err := LayerFromDir(dir, tmpDir)
	if err != nil {
		return "", err
	}
	img, err := imageOf(layer, cfg, v1.Platform{OS: "linux", Architecture: "amd64"})
	if err != nil {
		return "", err
	}
	ref, err := Ref(repo)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, append(opts, remote.WithContext(ctx))...); err != nil {
		return "", fmt.Errorf("pushing %s: %w", repo, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return ref.Context().Name() + "@" + d.String(), nil
}

// Pull reads the image ref (a platform's image, not an index) from a plain-HTTP registry.
func Pull(ref string) (v1.Image, error) {
	r, err := Ref(ref)
	if err != nil {
		return nil, err
	}
	img, err := remote.Image(r)
	if err != nil {
		return nil, fmt.Errorf("pulling %s: %w", ref, err)
	}
	return img, nil
}

// Walk calls fn for every entry of the image's flattened filesystem (what a container
// sees), with its path relative to / and its content.
func Walk(img v1.Image, fn func(name string, h *tar.Header, r io.Reader) error) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the image's filesystem: %w", err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(path.Clean("/"+h.Name), "/"), "/")
		if err := fn(name, h, tr); err != nil {
			return err
		}
	}
}
