//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	kustomizetypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"

	"sless.dev/sless/test/images"
	"sless.dev/sless/test/testenv"
)

// startRegistry serves the ground's registry and fills it the way a platform operator's
// would be: base images under the names the Dockerfiles use (Debian-built stand-ins), the
// kaniko executor built from source, and the platform image built by `make image`.
func (g *ground) startRegistry(ctx context.Context) error {
	reg, err := images.StartRegistry(registryIP+":5000", filepath.Join(g.dir, "registry"))
	if err != nil {
		return err
	}
	g.reg = reg
	g.stops = append(g.stops, reg.Stop)
	if err := g.hosts.set(registryIP, registryName); err != nil {
		return err
	}
	start := time.Now()
	if g.standIns, err = images.PushStandIns(ctx, g.tools["base-images"], registry); err != nil {
		return err
	}
	g.log.Info("base-image stand-ins pushed", "took", time.Since(start).Round(time.Millisecond))
	if g.kanikoImage, err = images.PushKaniko(ctx, filepath.Join(g.tools["kaniko"], "executor"), "/etc/ssl/certs/ca-certificates.crt",
		registry+"/kaniko/executor:e2e", g.dir); err != nil {
		return err
	}
	start = time.Now()
	refFile := filepath.Join(g.dir, "image.ref")
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "image", "REGISTRY="+registry+"/sless", "PLATFORMS=linux/amd64",
		"BASE_IMAGE="+registry+"/distroless/static-debian12@"+g.standIns["distroless/static-debian12:nonroot"].String(),
		"KO_FLAGS=--insecure-registry", "IMAGE_REF="+refFile)
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make image: %w\n%s", err, out)
	}
	ref, err := os.ReadFile(refFile)
	if err != nil {
		return err
	}
	g.platformImage = strings.TrimSpace(string(ref))
	g.log.Info("platform image built and pushed", "image", g.platformImage, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// podDatabaseURL is the history database as pods reach it: through the node's address.
func (g *ground) podDatabaseURL() string { return strings.Replace(g.dbURL, "127.0.0.1", nodeIP, 1) }

// installSless installs sless as docs/install.md tells a platform operator: the Secrets, then
// config/default through an overlay that points it at this ground (its registry's image by
// digest, the S3 endpoint, kaniko's registry settings), applied to the API server; the
// operator and gateway then run as pods from the platform image.
func (g *ground) installSless(ctx context.Context) error {
	for name, data := range map[string]map[string]string{
		"sless-s3": {"AWS_ACCESS_KEY_ID": s3Key, "AWS_SECRET_ACCESS_KEY": s3Secret},
		"sless-gateway": {"SLESS_JWT_HMAC_KEY": hmacKey, "SLESS_DATABASE_URL": g.podDatabaseURL(),
			"SLESS_AMQP_URL": strings.Replace(amqpURL, "127.0.0.1", nodeIP, 1)},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sless-system"}, StringData: data}
		if err := g.client.Create(ctx, s); err != nil {
			return err
		}
	}
	objs, err := g.renderInstall()
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := g.client.Patch(ctx, o, client.Apply, client.FieldOwner("sless-e2e"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	for _, name := range []string{"sless-operator", "sless-gateway"} {
		if err := g.poll(ctx, 3*time.Minute, "Deployment "+name+" available", func() bool {
			var d appsv1.Deployment
			return g.client.Get(ctx, client.ObjectKey{Namespace: "sless-system", Name: name}, &d) == nil && d.Status.AvailableReplicas > 0
		}); err != nil {
			return err
		}
	}
	var svc corev1.Service
	if err := g.client.Get(ctx, client.ObjectKey{Namespace: "sless-system", Name: "sless-gateway"}, &svc); err != nil {
		return err
	}
	g.gatewayURL = "http://" + svc.Spec.ClusterIP + ":8080"
	return g.waitHealthy(ctx, g.gatewayURL+"/healthz", time.Minute)
}

// renderInstall builds config/default with the ground's overlay, like `kubectl apply -k`.
func (g *ground) renderInstall() ([]*unstructured.Unstructured, error) {
	ref, err := images.Ref(g.platformImage)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(g.dir, "install")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	base, err := filepath.Rel(dir, filepath.Join(testenv.RepoRoot(), "config", "default")) // kustomize wants it relative
	if err != nil {
		return nil, err
	}
	k := kustomizetypes.Kustomization{
		Resources: []string{base},
		Images:    []kustomizetypes.Image{{Name: "ghcr.io/sless-dev/sless", NewName: ref.Context().Name(), Digest: ref.Identifier()}},
		Replicas:  []kustomizetypes.Replica{{Name: "sless-operator", Count: 1}, {Name: "sless-gateway", Count: 1}},
		Patches: []kustomizetypes.Patch{
			{Target: &kustomizetypes.Selector{ResId: resid.NewResIdKindOnly("ConfigMap", "sless-config")},
				Patch: `[{"op": "replace", "path": "/data/SLESS_S3_ENDPOINT", "value": "http://` + nodeIP + ":" + strconv.Itoa(s3Port) + `"}]`},
			{Target: &kustomizetypes.Selector{ResId: resid.NewResIdKindOnly("Deployment", "sless-operator")}, Patch: addArgs(
				"--registry="+registry, "--kaniko-image="+g.kanikoImage, "--kaniko-insecure-registry="+registry,
				"--kaniko-registry-mirror="+registry, "--history-secret=sless-history", "--build-timeout=5m",
				// The journeys run in parallel on 2 cores: two kaniko builds at a time, the rest queued.
				"--max-concurrent-builds=2")},
		},
	}
	b, err := yaml.Marshal(k)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), b, 0o644); err != nil {
		return nil, err
	}
	opts := krusty.MakeDefaultOptions()
	opts.LoadRestrictions = kustomizetypes.LoadRestrictionsNone
	res, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build of the e2e overlay: %w", err)
	}
	var out []*unstructured.Unstructured
	for _, r := range res.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, err
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// addArgs is a JSON patch appending args to the first container.
func addArgs(args ...string) string {
	ops := make([]string, len(args))
	for i, a := range args {
		ops[i] = `{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": ` + strconv.Quote(a) + `}`
	}
	return "[" + strings.Join(ops, ", ") + "]"
}
