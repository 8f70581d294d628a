//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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

// registryDoor is a second address of the ground's registry, serving the same content, that
// TestRegistryOutage's outage leaves open: the platform build started with the ground pulls
// and pushes through it whenever the outage falls.
const registryDoor = registryName + ":5001"

// startPlatformBuild starts TestPlatformDockerfile's kaniko Job as soon as the ground is up,
// so the suite's longest build overlaps the serial journeys instead of waiting for them: the
// repository's Dockerfile (for those who build the platform image with Docker) with the real
// kaniko, from the checkout as an S3 context, on the base-image stand-ins, modules from this
// machine's module cache. Nothing is started when this run does not select the test.
func (g *ground) startPlatformBuild(ctx context.Context) error {
	if !willRun("TestPlatformDockerfile") {
		return nil
	}
	stopDoor, err := g.reg.ServeAlso(registryIP + ":5001")
	if err != nil {
		return err
	}
	g.stops = append(g.stops, stopDoor)
	store, err := buildkit.NewS3Store(buildkit.S3Config{Endpoint: "http://" + nodeIP + ":" + strconv.Itoa(s3Port), AccessKey: s3Key, SecretKey: s3Secret, Bucket: bucket})
	if err != nil {
		return err
	}
	src, err := checkoutContext()
	if err != nil {
		return err
	}
	if err := store.Put(ctx, "e2e/platform.tar.gz", bytes.NewReader(src), int64(len(src)), "application/gzip"); err != nil {
		return fmt.Errorf("uploading the checkout: %w", err)
	}
	stopProxy, err := serveModuleCache()
	if err != nil {
		return err
	}
	g.stops = append(g.stops, stopProxy)
	base := registryDoor + "/distroless/static-debian12@" + g.standIns["distroless/static-debian12:nonroot"].String()
	layers, err := kanikoLayerCache()
	if err != nil {
		return err
	}
	return g.startJob(ctx, "platform-dockerfile", g.kanikoImage, nil, []string{
		"--context=s3://" + bucket + "/e2e/platform.tar.gz", "--dockerfile=Dockerfile", "--destination=" + registryDoor + "/sless/docker:e2e",
		"--build-arg=GOPROXY=http://" + nodeIP + ":" + strconv.Itoa(goProxyPort), "--build-arg=BASE_IMAGE=" + base, "--build-arg=VERSION=e2e",
		"--insecure-registry=" + registryDoor, "--registry-mirror=" + registryDoor, "--reproducible", "--verbosity=warn",
		"--cache=true", "--cache-repo=oci:/layer-cache/platform", "--cache-ttl=" + layerCacheTTL.String(),
	}, map[string]string{"/layer-cache": layers, "/kaniko/.docker": g.dockerConfig})
}

// layerCacheTTL is how long a layer kaniko cached for the Dockerfile build stays in use.
const layerCacheTTL = 72 * time.Hour

// kanikoLayerCache is the host directory that keeps the Dockerfile build's layers from one run
// to the next (kaniko --cache-repo as OCI layouts, one per layer): the layer that compiles
// the third-party packages is reused while go.mod, go.sum and cmd/sless/deps.txt stay as they
// are, as a CI's kaniko cache would be; the first run on a machine builds every layer.
// Layers past their TTL, which kaniko no longer reads, are removed.
func kanikoLayerCache() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "sless-e2e", "kaniko-layers")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > layerCacheTTL {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return "", err
			}
		}
	}
	return dir, nil
}

// TestPlatformDockerfile waits for the build startPlatformBuild started, then runs the image
// it pushed: `sless version` names the build.
func TestPlatformDockerfile(t *testing.T) {
	t.Parallel()
	// A bound for a hung build, not a figure: on a fresh machine (no kaniko layer cache) the
	// build compiles every third-party package (≈ 6 core-minutes) beside a cold `make test`,
	// and took 20 min from the ground's start on 12-06.
	build, took := waitJob(t, "platform-dockerfile", 35*time.Minute)
	t.Logf("kaniko built the Dockerfile in %s (started with the ground)", took)
	if build != "" {
		t.Logf("build log tail:\n%s", build)
	}
	out := runJob(t, "platform-dockerfile-run", registryDoor+"/sless/docker:e2e", nil, []string{"version"}, 2*time.Minute)
	if !strings.HasPrefix(out, "sless e2e") {
		t.Errorf("the image built from the Dockerfile printed %q, want sless e2e (...)", out)
	}
}

// willRun reports whether this run's -test.run and -test.skip select the top-level test name.
func willRun(name string) bool {
	matches := func(flagName string, unset bool) bool {
		f := flag.Lookup(flagName)
		if f == nil || f.Value.String() == "" {
			return unset
		}
		ok, err := regexp.MatchString(strings.Split(f.Value.String(), "/")[0], name)
		return err == nil && ok
	}
	return matches("test.run", true) && !matches("test.skip", false)
}

// checkoutContext is the repository's files (tracked and new, not ignored) as a tar.gz.
func checkoutContext() ([]byte, error) {
	root := testenv.RepoRoot()
	files, err := exec.Command("git", "-C", root, "ls-files", "-co", "--exclude-standard").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
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
		return nil, fmt.Errorf("tar of the checkout: %w", err)
	}
	return out, nil
}

// serveModuleCache serves GOMODCACHE/cache/download on the node's address, as a GOPROXY.
func serveModuleCache() (stop func(), err error) {
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", nodeIP+":"+strconv.Itoa(goProxyPort))
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(filepath.Join(strings.TrimSpace(string(modcache)), "cache", "download"))), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

// runJob runs image with args as a Job in sless-system (the S3 credentials of the platform
// at hand), waits for it to complete and returns the tail of its pod's log.
func runJob(t *testing.T, name, image string, command, args []string, within time.Duration) string {
	t.Helper()
	if err := g.startJob(context.Background(), name, image, command, args, nil); err != nil {
		t.Fatal(err)
	}
	out, _ := waitJob(t, name, within)
	return out
}

// startJob creates the Job name running image with args in sless-system, with hostDirs
// (mount path → host directory) mounted as hostPath volumes.
func (g *ground) startJob(ctx context.Context, name, image string, command, args []string, hostDirs map[string]string) error {
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
	spec := &job.Spec.Template.Spec
	for _, mountPath := range slices.Sorted(maps.Keys(hostDirs)) {
		vol := fmt.Sprintf("host-%d", len(spec.Volumes))
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDirs[mountPath], Type: ptr.To(corev1.HostPathDirectory)}}})
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: mountPath})
	}
	if err := g.client.Create(ctx, job); err != nil {
		return fmt.Errorf("creating job %s: %w", name, err)
	}
	return nil
}

// waitJob waits for the Job name in sless-system to finish, fails t if it failed, and returns
// the tail of its pod's log and how long it ran, creation to completion.
func waitJob(t *testing.T, name string, within time.Duration) (string, time.Duration) {
	t.Helper()
	ctx := context.Background()
	job := &batchv1.Job{}
	var failed bool
	var took time.Duration
	waitFor(t, within, "job "+name+" to finish", func() bool {
		if err := g.client.Get(ctx, client.ObjectKey{Namespace: "sless-system", Name: name}, job); err != nil {
			return false
		}
		for _, c := range job.Status.Conditions {
			if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
				failed = c.Type == batchv1.JobFailed
				took = c.LastTransitionTime.Sub(job.CreationTimestamp.Time)
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
	return tail(out, 3000), took
}
