//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
)

const terraformConfig = `terraform {
  required_providers {
    sless = { source = "sless.dev/sless/sless" }
  }
}

provider "sless" {}

resource "sless_function" "hello" {
  name                  = "tf-hello"
  runtime               = "python3.11"
  source_dir            = "${path.module}/hello"
  min_replicas          = 0
  max_replicas          = 2
  scale_down_period_sec = 5
}

output "url" { value = sless_function.hello.url }
`

// terraformDir writes main.tf, the function's source and a CLI config pointing Terraform at
// the provider under test.
func terraformDir(t *testing.T, mainTF, handler string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{"main.tf": mainTF, "hello/handler.py": handler,
		"cli.tfrc": `provider_installation {
  dev_overrides { "sless.dev/sless/sless" = "` + filepath.Dir(g.tools["terraform-provider"]) + `" }
  direct {}
}
`}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// terraform runs the real Terraform CLI in dir as tenant tn and returns its output.
func terraform(t *testing.T, dir string, tn tenant, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(g.tools["terraform"], args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+filepath.Join(dir, "cli.tfrc"), "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1",
		"SLESS_ENDPOINT="+g.gatewayURL, "SLESS_TOKEN="+tn.token)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("terraform %s took %s", args[0], time.Since(start).Round(time.Millisecond))
	return string(out), err
}

// TestTerraformJourney is journey 7: the same function through the Terraform provider and
// the real Terraform CLI — apply (upload, kaniko build, Ready) → a cold start through the
// gateway, interceptor and KEDA → destroy removes it all.
func TestTerraformJourney(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	dir := terraformDir(t, terraformConfig, helloPython)
	if out, err := terraform(t, dir, tn, "apply", "-auto-approve", "-input=false", "-no-color"); err != nil {
		t.Fatalf("terraform apply: %v\n%s", err, out)
	}
	if d := deployment(t, tn.ns, "tf-hello"); *d.Spec.Replicas != 0 {
		t.Fatalf("applied function has %d replicas, want 0", *d.Spec.Replicas)
	}
	// The Service may be younger than the resolver's hosts cache (see deployFunction).
	time.Sleep(6 * time.Second)
	resp, body := invoke(t, tn, "tf-hello", `{"name": "terraform"}`)
	if !checkHello(t, resp, body, "terraform") {
		t.Errorf("first request: %s %q, want a cold start", coldStartHeader, resp.Header.Get(coldStartHeader))
	}
	if out, err := terraform(t, dir, tn, "destroy", "-auto-approve", "-input=false", "-no-color"); err != nil {
		t.Fatalf("terraform destroy: %v\n%s", err, out)
	}
	ctx := context.Background()
	key := client.ObjectKey{Namespace: tn.ns, Name: "tf-hello"}
	waitFor(t, time.Minute, "function and deployment gone after destroy", func() bool {
		return apierrors.IsNotFound(g.client.Get(ctx, key, &v1.Function{})) && apierrors.IsNotFound(g.client.Get(ctx, key, &appsv1.Deployment{}))
	})
	if resp, _ := invoke(t, tn, "tf-hello", `{}`); resp.StatusCode != http.StatusNotFound {
		t.Errorf("destroyed function through the gateway: %d, want 404", resp.StatusCode)
	}
}

// TestTerraformBuildError: a source kaniko cannot build fails `terraform apply` with
// kaniko's own error tail, where the user looks first.
func TestTerraformBuildError(t *testing.T) {
	t.Parallel()
	tn := newTenant(t)
	dir := terraformDir(t, strings.Replace(terraformConfig, `"tf-hello"`, `"tf-broken"`, 1), "def handle(event:\n    return 1\n")
	out, err := terraform(t, dir, tn, "apply", "-auto-approve", "-input=false", "-no-color")
	if err == nil {
		t.Fatalf("terraform apply of a source with a syntax error succeeded:\n%s", out)
	}
	for _, want := range []string{"SyntaxError", "handler.py"} {
		if !strings.Contains(out, want) {
			t.Errorf("terraform apply's error lacks %q:\n%s", want, out)
		}
	}
}
