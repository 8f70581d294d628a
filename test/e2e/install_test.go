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

	"github.com/google/go-containerregistry/pkg/authn"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/test/images"
	"sless.dev/sless/test/testenv"
)

// startRegistry serves the ground's registry and fills it the way a platform operator's
// would be: base images under the names the Dockerfiles use (Debian-built stand-ins), the
// kaniko executor built from source, and the platform image built by `make image`.
func (g *ground) startRegistry(ctx context.Context) error {
	reg, err := images.StartRegistry(registryIP+":5000", filepath.Join(g.dir, "registry"), &authn.Basic{Username: registryUser, Password: registryPassword})
	if err != nil {
		return err
	}
	g.reg = reg
	g.stops = append(g.stops, reg.Stop)
	if err := g.hosts.set(registryIP, registryName); err != nil {
		return err
	}
	g.dockerConfig = filepath.Join(g.dir, "docker")
	if err := os.MkdirAll(g.dockerConfig, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(g.dockerConfig, "config.json"), reg.DockerConfig(registry, registryDoor), 0o644); err != nil {
		return err
	}
	start := time.Now()
	if g.standIns, err = images.PushStandIns(ctx, g.tools["base-images"], registry, reg.Auth()); err != nil {
		return err
	}
	g.log.Info("base-image stand-ins pushed", "took", time.Since(start).Round(time.Millisecond))
	if g.kanikoImage, err = images.PushKaniko(ctx, filepath.Join(g.tools["kaniko"], "executor"), "/etc/ssl/certs/ca-certificates.crt",
		registry+"/kaniko/executor:e2e", g.dir, reg.Auth()); err != nil {
		return err
	}
	start = time.Now()
	refFile := filepath.Join(g.dir, "image.ref")
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "image", "REGISTRY="+registry+"/sless", "PLATFORMS=linux/amd64",
		"BASE_IMAGE="+registry+"/distroless/static-debian12@"+g.standIns["distroless/static-debian12:nonroot"].String(),
		"KO_FLAGS=--insecure-registry", "IMAGE_REF="+refFile)
	cmd.Dir, cmd.Env = testenv.RepoRoot(), append(os.Environ(), "DOCKER_CONFIG="+g.dockerConfig) // ko pushes with the account
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
// the Helm chart config/helm/sless through the Helm SDK (`helm install sless -n sless-system`)
// with values that point it at this ground (its registry's image by digest, the S3 endpoint,
// kaniko's registry settings); the operator and gateway then run as pods from the platform
// image. config/default is rendered from the same chart (`make generate`).
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
	push := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "registry-push", Namespace: "sless-system"},
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: g.reg.DockerConfig(registry)}}
	if err := g.client.Create(ctx, push); err != nil {
		return err
	}
	if err := g.helmInstall(ctx); err != nil {
		return err
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

// helmInstall is `helm install sless config/helm/sless -n sless-system --values <ground>`.
func (g *ground) helmInstall(ctx context.Context) error {
	ref, err := images.Ref(g.platformImage)
	if err != nil {
		return err
	}
	ch, err := loader.Load(filepath.Join(testenv.RepoRoot(), "config", "helm", "sless"))
	if err != nil {
		return fmt.Errorf("loading the chart: %w", err)
	}
	values := map[string]any{
		"image":  map[string]any{"repository": ref.Context().Name(), "digest": ref.Identifier()},
		"config": map[string]any{"SLESS_S3_ENDPOINT": "http://" + nodeIP + ":" + strconv.Itoa(s3Port), "SLESS_FUNCTIONS_DOMAIN": functionsDomain},
		"operator": map[string]any{"replicas": 1, "registry": registry, "kanikoImage": g.kanikoImage,
			// Public addresses (the default) and the registry, which is on a private one. The
			// ground's kubelets do not enforce NetworkPolicy; the operator renders it all the same.
			"buildEgress": []any{"0.0.0.0/0", "::/0", registryIP + "/32:5000,5001"}, "extraArgs": []any{
				"--kaniko-insecure-registry=" + registry, "--kaniko-registry-mirror=" + registry,
				"--history-secret=sless-history", "--build-timeout=" + buildTimeout.String(), "--registry-secret=registry-push",
				// The journeys run in parallel on 2 cores: two kaniko builds at a time, the rest queued.
				"--max-concurrent-builds=2"}},
		"gateway": map[string]any{"replicas": 1},
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &g.kubeconfig, ptr.To("sless-system")
	var cfg action.Configuration
	if err := cfg.Init(flags, "sless-system", "secret", func(format string, v ...any) {
		g.log.Debug("helm: " + fmt.Sprintf(format, v...))
	}); err != nil {
		return fmt.Errorf("helm: %w", err)
	}
	install := action.NewInstall(&cfg)
	install.ReleaseName, install.Namespace = "sless", "sless-system"
	rel, err := install.RunWithContext(ctx, ch, values)
	if err != nil {
		return fmt.Errorf("helm install sless: %w", err)
	}
	g.log.Info("helm release installed", "release", rel.Name, "version", rel.Version, "chart", rel.Chart.Metadata.Version)
	return nil
}
