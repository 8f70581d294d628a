package images

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"sless.dev/sless/test/testenv"
)

// TestPlatformImage builds the platform image with `make image` twice on a static base built
// locally — pushed to a real registry, then as an OCI layout — and checks what a cluster
// relies on: both builds give the same digest (reproducible), the index holds linux/amd64 and
// linux/arm64, each runs as the non-root user with CA certificates and time-zone data
// present, and the binary for this machine runs.
func TestPlatformImage(t *testing.T) {
	ctx := context.Background()
	standIns := testenv.BuiltTool(t, "base-images.sh")
	reg, err := StartRegistry("127.0.0.1:0", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	digests, err := PushStandIns(ctx, standIns, reg.Host)
	if err != nil {
		t.Fatal(err)
	}
	base := reg.Host + "/distroless/static-debian12@" + digests["distroless/static-debian12:nonroot"].String()
	out := t.TempDir()
	makeImage(t, "REGISTRY="+reg.Host+"/sless", "BASE_IMAGE="+base, "IMAGE_REF="+filepath.Join(out, "image.ref"), "VERSION=v0.0.0-test")
	refText, err := os.ReadFile(filepath.Join(out, "image.ref"))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := Ref(strings.TrimSpace(string(refText)))
	if err != nil {
		t.Fatalf("make image wrote %q: %v", refText, err)
	}
	if !strings.HasPrefix(ref.String(), reg.Host+"/sless/sless") || ref.Identifier() == "" || !strings.Contains(ref.String(), "@sha256:") {
		t.Fatalf("pushed reference %s, want %s/sless/sless@sha256:...", ref, reg.Host)
	}
	idx, err := remote.Index(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}

	// ko takes the layout's path for a repository name: lower case only.
	layoutDir, err := os.MkdirTemp("", "sless-image-layout-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(layoutDir)
	makeImage(t, "BASE_IMAGE="+base, "IMAGE_LAYOUT="+layoutDir, "VERSION=v0.0.0-test")
	lp, err := layout.ImageIndexFromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := lp.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Digest != pushed {
		t.Fatalf("OCI layout holds %+v, want the pushed index %s: the same commit must give the same digest", im.Manifests, pushed)
	}

	manifest, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for _, m := range manifest.Manifests {
		if m.Platform == nil || machines[m.Platform.Architecture] == 0 || m.Platform.OS != "linux" {
			t.Errorf("unexpected platform %+v", m.Platform)
			continue
		}
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		binary := checkPlatformImage(t, img, m.Platform.Architecture)
		if im, err := img.Manifest(); err == nil {
			var size int64
			for _, l := range im.Layers {
				size += l.Size
			}
			t.Logf("%s: %s, %.1f MB compressed in %d layers", m.Platform.Architecture, m.Digest, float64(size)/1e6, len(im.Layers))
		}
		if f, err := elf.NewFile(bytes.NewReader(binary)); err != nil || f.Machine != machines[m.Platform.Architecture] {
			t.Errorf("%s: /ko-app/sless is not a %s ELF binary (%v)", m.Platform.Architecture, machines[m.Platform.Architecture], err)
		} else if m.Platform.Architecture == "amd64" {
			runVersion(t, binary)
		}
		delete(machines, m.Platform.Architecture)
	}
	if len(machines) != 0 {
		t.Errorf("index lacks %v", machines)
	}
}

func makeImage(t *testing.T, vars ...string) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"--no-print-directory", "image"}, vars...)...)
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image %v: %v\n%s", vars, err, out)
	}
}

// checkPlatformImage checks one platform's config and files and returns its sless binary.
func checkPlatformImage(t *testing.T, img v1.Image, arch string) []byte {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532" || strings.Join(cf.Config.Entrypoint, " ") != "/ko-app/sless" || cf.Architecture != arch {
		t.Errorf("%s: user %q entrypoint %v architecture %s, want 65532, /ko-app/sless, %s", arch, cf.Config.User, cf.Config.Entrypoint, cf.Architecture, arch)
	}
	want := map[string]bool{"etc/ssl/certs/ca-certificates.crt": false, "usr/share/zoneinfo/Europe/Berlin": false, "etc/passwd": false}
	var binary []byte
	err = Walk(img, func(name string, h *tar.Header, r io.Reader) error {
		if _, ok := want[name]; ok {
			want[name] = true
		}
		if name == "ko-app/sless" {
			if h.Mode&0o005 != 0o005 {
				t.Errorf("%s: /ko-app/sless mode %o is not executable by the image's user", arch, h.Mode)
			}
			var err error
			binary, err = io.ReadAll(r)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for f, ok := range want {
		if !ok {
			t.Errorf("%s: image has no /%s", arch, f)
		}
	}
	return binary
}

// runVersion runs the image's binary for this machine: `sless version` names the build.
func runVersion(t *testing.T, binary []byte) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sless")
	if err := os.WriteFile(p, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(p, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "sless v0.0.0-test ") {
		t.Errorf("sless version from the image: %v %q, want sless v0.0.0-test", err, out)
	}
}
