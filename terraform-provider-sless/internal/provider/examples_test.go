package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// devOverridesBlock is the CLI configuration block of the README, with its directory
// replaced: the test runs what the README tells users to run.
var devOverridesBlock = regexp.MustCompile("(?s)```hcl\n(provider_installation \\{.*?dev_overrides.*?)```")

// providerBinDir holds the provider binary once built; TestMain removes it.
var providerBinDir string

// providerBinary builds this provider once, for the tests that run Terraform by hand; it
// returns the directory holding the binary, what a dev_overrides entry names.
var providerBinary = sync.OnceValues(func() (string, error) {
	binDir, err := os.MkdirTemp("", "sless-tf-provider-")
	if err != nil {
		return "", err
	}
	providerBinDir = binDir
	build := exec.Command("go", "build", "-o", filepath.Join(binDir, "terraform-provider-sless"), ".")
	build.Dir = filepath.Join(repoRoot, "terraform-provider-sless")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build the provider: %w\n%s", err, out)
	}
	return binDir, nil
})

// terraformCLI runs the Terraform binary directly (no test framework) in a copy of an
// example directory, with the README's dev_overrides configuration, against sless dev.
type terraformCLI struct {
	t        *testing.T
	tf, work string
	env      []string
	d        *slessDev
}

// newTerraformCLI copies exampleDir and prepares the CLI configuration; env is added to
// every command's environment.
func newTerraformCLI(t *testing.T, exampleDir string, env ...string) *terraformCLI {
	t.Helper()
	d := sless(t)
	tf := terraformBinary(t)
	binDir, err := providerBinary()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "terraform-provider-sless", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := devOverridesBlock.FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no ```hcl provider_installation { dev_overrides ... } block")
	}
	cliConfig := regexp.MustCompile(`("sless.dev/sless/sless"\s*=\s*)"[^"]*"`).ReplaceAll(m[1], []byte(`${1}"`+binDir+`"`))
	cliPath := filepath.Join(t.TempDir(), "sless.tfrc")
	if err := os.WriteFile(cliPath, cliConfig, 0o644); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(t.TempDir(), "example")
	if err := os.CopyFS(work, os.DirFS(exampleDir)); err != nil {
		t.Fatal(err)
	}
	env = append([]string{"TF_CLI_CONFIG_FILE=" + cliPath, "TF_IN_AUTOMATION=1", "SLESS_ENDPOINT=" + d.endpoint, "SLESS_TOKEN=" + d.token}, env...)
	return &terraformCLI{t: t, tf: tf, work: work, env: env, d: d}
}

// run runs terraform with args and returns its combined output.
func (c *terraformCLI) run(args ...string) (string, error) {
	cmd := exec.Command(c.tf, args...)
	cmd.Dir = c.work
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mustRun is run that fails the test on an error.
func (c *terraformCLI) mustRun(args ...string) string {
	c.t.Helper()
	out, err := c.run(args...)
	if err != nil {
		c.t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// destroyAtEnd destroys what the configuration created when the test ends and checks that
// nothing is left on the server.
func (c *terraformCLI) destroyAtEnd() {
	c.t.Cleanup(func() {
		if out, err := c.run("destroy", "-auto-approve", "-input=false", "-no-color"); err != nil {
			c.t.Errorf("terraform destroy: %v\n%s", err, out)
		}
		if err := checkGone(c.d, c.t)(nil); err != nil {
			c.t.Error(err)
		}
	})
}

// outputs are the configuration's outputs as strings (numbers in decimal).
func (c *terraformCLI) outputs() map[string]string {
	c.t.Helper()
	var raw map[string]struct{ Value any }
	if err := json.Unmarshal([]byte(c.mustRun("output", "-json")), &raw); err != nil {
		c.t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range raw {
		out[k] = fmt.Sprint(v.Value)
	}
	return out
}

// TestAccExampleWithDevOverrides runs the Terraform binary directly (no test framework) on
// examples/terraform/ with the README's dev_overrides configuration against sless dev:
// apply, invoke, an empty second plan, destroy.
func TestAccExampleWithDevOverrides(t *testing.T) {
	cli := newTerraformCLI(t, filepath.Join(repoRoot, "examples", "terraform"))
	d, run, mustRun := cli.d, cli.run, cli.mustRun
	cli.destroyAtEnd()

	if out := mustRun("validate", "-no-color"); !strings.Contains(out, "Provider development overrides are in effect") {
		t.Fatalf("validate did not use the dev override:\n%s", out)
	}
	mustRun("apply", "-auto-approve", "-input=false", "-no-color")
	outputs := cli.outputs()
	if outputs["revisions"] != "[hello-1 ready 100%]" {
		t.Errorf("revisions output %q, want [hello-1 ready 100%%]", outputs["revisions"])
	}
	if outputs["phase"] != "Ready" {
		t.Errorf("phase output %q, want Ready", outputs["phase"])
	}
	if !strings.Contains(outputs["job_result"], `"message":"Hello, Terraform"`) {
		t.Errorf("job_result %q, want the greeting of the job's event", outputs["job_result"])
	}
	if !strings.Contains(outputs["report_result"], `"message":"Report, ops"`) {
		t.Errorf("report_result %q, want the self-contained job's greeting", outputs["report_result"])
	}
	status, body, err := invoke(outputs["url"])
	if err != nil || status != 200 || !strings.Contains(body, `"message":"Hello, world"`) {
		t.Errorf("invoking %s: %d %q %v", outputs["url"], status, body, err)
	}
	// A second plan of the same configuration has nothing to do (exit code 0, not 2).
	if out, err := run("plan", "-detailed-exitcode", "-input=false", "-no-color"); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 2 {
			t.Fatalf("second plan wants changes:\n%s", out)
		}
		t.Fatalf("terraform plan: %v\n%s", err, out)
	}
	c := d.client(t)
	if _, err := c.GetFunction(context.Background(), c.namespace, "hello"); err != nil {
		t.Fatalf("the example's function is not on the server: %v", err)
	}
}
