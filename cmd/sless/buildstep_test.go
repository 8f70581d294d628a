package main

import (
	"encoding/base64"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/scaling"
	"sless.dev/sless/test/testkit"
)

// TestPushStepAsRendered runs the push step with the arguments the operator renders for it,
// against a registry that takes pushes only with credentials, given the way the build pod
// gives them ($DOCKER_CONFIG): the image lands at the destination, and the termination log
// holds it by digest as the operator reads it (scaling.BuildDigest). A layout with a planted
// link is refused and nothing is pushed.
func TestPushStepAsRendered(t *testing.T) {
	reg := httptest.NewServer(pushNeedsAuth("builder", "s3cret", registry.New(registry.Logger(log.New(io.Discard, "", 0)))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	docker := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte("builder:s3cret"))
	if err := os.WriteFile(filepath.Join(docker, "config.json"), []byte(`{"auths":{"`+host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", docker)

	opts := scaling.DefaultOptions()
	opts.SlessImage, opts.Build.Registry, opts.Build.InsecureRegistries = "sless:test", host, []string{host}
	target := scaling.BuildTarget{Namespace: "sless-abc", Name: "hello", Label: scaling.LabelFunction,
		Source: v1.SourceRef{ContextKey: "contexts/sless-abc/hello/1.tar.gz", SHA256: strings.Repeat("ab", 32)}}
	job, err := scaling.MakeBuildJob(target, opts)
	if err != nil {
		t.Fatal(err)
	}
	dest, err := scaling.ImageFor(target, opts.Build)
	if err != nil {
		t.Fatal(err)
	}
	// The rendered arguments, with the layout and the termination log where this test has them.
	args := func(dir, termLog string) []string {
		var out []string
		for _, a := range job.Spec.Template.Spec.Containers[0].Args {
			if strings.HasPrefix(a, "--layout=") {
				a = "--layout=" + dir
			}
			out = append(out, a)
		}
		return append(out, "--termination-log="+termLog)
	}

	dir := filepath.Join(t.TempDir(), "image")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	termLog := filepath.Join(t.TempDir(), "termination-log")
	if out, err := testkit.RunCommand(t, newRootForTest, args(dir, termLog)...); err != nil {
		t.Fatalf("push step: %v\n%s", err, out)
	}
	msg, err := os.ReadFile(termLog)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: scaling.BuildPushContainer,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: string(msg)}}}}}}
	got, ok := scaling.BuildDigest(pod, dest)
	want, _ := img.Digest()
	if !ok || !strings.HasSuffix(got, "@"+want.String()) {
		t.Fatalf("termination log %q read as %q (%v), want %s by digest %s", msg, got, ok, dest, want)
	}
	ref, _ := name.NewTag(dest, name.Insecure)
	if d, err := remote.Head(ref); err != nil || d.Digest != want {
		t.Errorf("%s in the registry: %v %v, want %s", dest, d, err, want)
	}

	// A planted link: refused before anything is sent, and the error says so.
	blobs := filepath.Join(dir, "blobs", "sha256")
	entries, _ := os.ReadDir(blobs)
	victim := filepath.Join(blobs, entries[0].Name())
	if err := os.Remove(victim); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(docker, "config.json"), victim); err != nil {
		t.Fatal(err)
	}
	out, err := testkit.RunCommand(t, newRootForTest, args(dir, filepath.Join(t.TempDir(), "termination-log"))...)
	if err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("push of a layout with a link: %v\n%s", err, out)
	}
}

// newRootForTest is the sless command with its servers' subcommands, as main builds it.
func newRootForTest() *cobra.Command {
	root := &cobra.Command{Use: "sless", SilenceUsage: true, SilenceErrors: true}
	for _, mk := range subcommands {
		root.AddCommand(mk())
	}
	return root
}

// pushNeedsAuth serves h, asking for user:password (HTTP Basic) on every request that writes.
func pushNeedsAuth(user, password string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
				w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
				http.Error(w, "pushes need credentials", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}
