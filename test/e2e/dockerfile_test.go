//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/test/testenv"
)

// goProxyPort serves this machine's module cache to builds on the ground, which has no way
// out: the cache's download directory is laid out as a GOPROXY.
const goProxyPort = 19300

// TestPlatformDockerfile builds the repository's Dockerfile (for those who build the platform
// image with Docker) with the real kaniko in a Job, from the checkout as an S3 context, on the
// base-image stand-ins, then runs the image it pushed: `sless version` names the build.
func TestPlatformDockerfile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := buildkit.NewS3Store(buildkit.S3Config{Endpoint: "http://" + nodeIP + ":" + strconv.Itoa(s3Port), AccessKey: s3Key, SecretKey: s3Secret, Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	src := checkoutContext(t)
	if err := store.Put(ctx, "e2e/platform.tar.gz", bytes.NewReader(src), int64(len(src)), "application/gzip"); err != nil {
		t.Fatal(err)
	}
	serveModuleCache(t)
	image := registry + "/sless/docker:e2e"
	base := registry + "/distroless/static-debian12@" + g.standIns["distroless/static-debian12:nonroot"].String()
	start := time.Now()
	build := runJob(t, "platform-dockerfile", g.kanikoImage, nil, []string{
		"--context=s3://" + bucket + "/e2e/platform.tar.gz", "--dockerfile=Dockerfile", "--destination=" + image,
		"--build-arg=GOPROXY=http://" + nodeIP + ":" + strconv.Itoa(goProxyPort), "--build-arg=BASE_IMAGE=" + base, "--build-arg=VERSION=e2e",
		"--insecure-registry=" + registry, "--registry-mirror=" + registry, "--reproducible", "--cache=false", "--verbosity=warn",
	}, 20*time.Minute)
	t.Logf("kaniko built the Dockerfile in %s", time.Since(start).Round(time.Second))
	if build != "" {
		t.Logf("build log tail:\n%s", build)
	}
	out := runJob(t, "platform-dockerfile-run", image, nil, []string{"version"}, 2*time.Minute)
	if !strings.HasPrefix(out, "sless e2e") {
		t.Errorf("the image built from the Dockerfile printed %q, want sless e2e (...)", out)
	}
}

// checkoutContext is the repository's files (tracked and new, not ignored) as a tar.gz.
func checkoutContext(t *testing.T) []byte {
	t.Helper()
	root := testenv.RepoRoot()
	files, err := exec.Command("git", "-C", root, "ls-files", "-co", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var present []string
	for _, f := range strings.Fields(string(files)) {
		if _, err := os.Lstat(filepath.Join(root, f)); err == nil {
			present = append(present, f)
		}
	}
	cmd := exec.Command("tar", "-C", root, "--null", "-T", "-", "-czf", "-")
	cmd.Stdin = strings.NewReader(strings.Join(present, "\x00") + "\x00")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tar of the checkout: %v", err)
	}
	return out
}

// serveModuleCache serves GOMODCACHE/cache/download on the node's address for the test.
func serveModuleCache(t *testing.T) {
	t.Helper()
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", nodeIP+":"+strconv.Itoa(goProxyPort))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(filepath.Join(strings.TrimSpace(string(modcache)), "cache", "download"))), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// runJob runs image with args as a Job in sless-system (the S3 credentials of the platform
// at hand), waits for it to complete and returns the tail of its pod's log.
func runJob(t *testing.T, name, image string, command, args []string, within time.Duration) string {
	t.Helper()
	ctx := context.Background()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sless-system"},
		Spec: batchv1.JobSpec{BackoffLimit: ptr.To(int32(0)), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "main", Image: image, Command: command, Args: args,
				Env:     []corev1.EnvVar{{Name: "AWS_REGION", Value: "us-east-1"}, {Name: "S3_ENDPOINT", Value: "http://" + nodeIP + ":" + strconv.Itoa(s3Port)}, {Name: "S3_FORCE_PATH_STYLE", Value: "true"}},
				EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "sless-s3"}}}},
			}},
		}}},
	}
	if err := g.client.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	var failed bool
	waitFor(t, within, "job "+name+" to finish", func() bool {
		if err := g.client.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return false
		}
		for _, c := range job.Status.Conditions {
			if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
				failed = c.Type == batchv1.JobFailed
				return true
			}
		}
		return false
	})
	logs, _ := filepath.Glob(filepath.Join(g.dir, "pods", "*", "sless-system_"+name+"-*_main-0.log"))
	var out []byte
	for _, l := range logs {
		out = append(out, logText(l)...)
	}
	if failed {
		t.Fatalf("job %s failed:\n%s", name, tail(out, 3000))
	}
	return tail(out, 3000)
}
