package provider

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// devOverridesBlock is the CLI configuration block of the README, with its directory
// replaced: the test runs what the README tells users to run.
var devOverridesBlock = regexp.MustCompile("(?s)```hcl\n(provider_installation \\{.*?dev_overrides.*?)```")

// TestAccExampleWithDevOverrides runs the Terraform binary directly (no test framework) on
// examples/terraform/ with the README's dev_overrides configuration against sless dev:
// apply, invoke, an empty second plan, destroy.
func TestAccExampleWithDevOverrides(t *testing.T) {
	d := sless(t)
	tf := terraformBinary(t)
	moduleDir := filepath.Join(repoRoot, "terraform-provider-sless")
	binDir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(binDir, "terraform-provider-sless"), ".")
	build.Dir = moduleDir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build the provider: %v\n%s", err, out)
	}
	readme, err := os.ReadFile(filepath.Join(moduleDir, "README.md"))
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
	if err := os.CopyFS(work, os.DirFS(filepath.Join(repoRoot, "examples", "terraform"))); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(tf, args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+cliPath, "TF_IN_AUTOMATION=1", "SLESS_ENDPOINT="+d.endpoint, "SLESS_TOKEN="+d.token)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	mustRun := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	defer func() {
		if out, err := run("destroy", "-auto-approve", "-input=false", "-no-color"); err != nil {
			t.Errorf("terraform destroy: %v\n%s", err, out)
		}
		if err := checkGone(d, t)(nil); err != nil {
			t.Error(err)
		}
	}()

	if out := mustRun("validate", "-no-color"); !strings.Contains(out, "Provider development overrides are in effect") {
		t.Fatalf("validate did not use the dev override:\n%s", out)
	}
	mustRun("apply", "-auto-approve", "-input=false", "-no-color")
	var outputs map[string]struct{ Value string }
	if err := json.Unmarshal([]byte(mustRun("output", "-json")), &outputs); err != nil {
		t.Fatal(err)
	}
	if outputs["phase"].Value != "Ready" {
		t.Errorf("phase output %q, want Ready", outputs["phase"].Value)
	}
	if !strings.Contains(outputs["job_result"].Value, `"message":"Hello, Terraform"`) {
		t.Errorf("job_result %q, want the greeting of the job's event", outputs["job_result"].Value)
	}
	if !strings.Contains(outputs["report_result"].Value, `"message":"Report, ops"`) {
		t.Errorf("report_result %q, want the self-contained job's greeting", outputs["report_result"].Value)
	}
	status, body, err := invoke(outputs["url"].Value)
	if err != nil || status != 200 || !strings.Contains(body, `"message":"Hello, world"`) {
		t.Errorf("invoking %s: %d %q %v", outputs["url"].Value, status, body, err)
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
