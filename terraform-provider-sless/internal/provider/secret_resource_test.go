package provider

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"sless.dev/sless/gateway/api"
)

// readerHandler is a Python handler that proves it got DB_PASSWORD without answering it: a
// short SHA-256, as passwordHash computes it.
const readerHandler = `import hashlib
import os


def handle(event, request=None):
    return hashlib.sha256(os.environ.get("DB_PASSWORD", "").encode()).hexdigest()[:12]
`

func passwordHash(password string) string {
	sum := sha256.Sum256([]byte(password))
	return hex.EncodeToString(sum[:])[:12]
}

// secretConfig declares the secret acc-db with password and a binary key, and the function
// acc-secret-fn reading the password through secret_env.
func secretConfig(dir, password string) string {
	return fmt.Sprintf(`
resource "sless_secret" "db" {
  name        = "acc-db"
  data        = { username = "app", password = %[2]q }
  data_base64 = { "tls.key" = %[3]q }
}

resource "sless_function" "reader" {
  name       = "acc-secret-fn"
  runtime    = "python3.11"
  source_dir = %[1]q
  secret_env = [
    { name = "DB_PASSWORD", secret = sless_secret.db.name, key = "password" },
  ]
}
`, dir, password, base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 0xff}))
}

// checkInvokeEventually calls the function until it answers want: a rotation restarts the
// function after the apply that made it returns.
func checkInvokeEventually(address, want string) tfresource.TestCheckFunc {
	return func(s *terraform.State) error {
		url := s.RootModule().Resources[address].Primary.Attributes["url"]
		var last string
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
			status, body, err := invoke(url)
			if err == nil && status == 200 && strings.Trim(body, "\"\n") == want {
				return nil
			}
			last = fmt.Sprintf("%d %q %v", status, body, err)
		}
		return fmt.Errorf("invoking %s: %s, want %q", url, last, want)
	}
}

// TestAccSecret creates a secret and a function that uses it, rotates the secret (the
// function restarts with the new value), imports it, writes it back after a rotation made
// outside Terraform, and fails to delete it while something outside Terraform uses it.
func TestAccSecret(t *testing.T) {
	d := sless(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "handler.py"), readerHandler)
	const addr, fnAddr = "sless_secret.db", "sless_function.reader"
	ctx := context.Background()
	c := d.client(t)
	keys := knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("password"), knownvalue.StringExact("tls.key"), knownvalue.StringExact("username")})
	// Every object removed from the configuration: Terraform destroys them, the function
	// first (the state records that it uses the secret).
	const nothing = "locals {}\n"
	tfresource.Test(t, tfresource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             checkGone(d, t),
		Steps: []tfresource.TestStep{
			{
				// Plan-time checks across attributes: a variable set twice, a key given twice.
				Config: strings.Replace(secretConfig(src, "first-password"), "secret_env = [", `env_vars   = { DB_PASSWORD = "plain" }
  secret_env = [`, 1),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`variable\s+"DB_PASSWORD"\s+is\s+set\s+twice`),
			},
			{
				Config:      strings.Replace(secretConfig(src, "first-password"), `"tls.key" =`, `"password" =`, 1),
				PlanOnly:    true,
				ExpectError: regexp.MustCompile(`key\s+"password"\s+is\s+also\s+in\s+data;\s+give\s+each\s+key\s+in\s+one\s+of`),
			},
			{
				Config: secretConfig(src, "first-password"),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectSensitiveValue(addr, tfjsonpath.New("data")),
					plancheck.ExpectSensitiveValue(addr, tfjsonpath.New("data_base64")),
					plancheck.ExpectKnownValue(addr, tfjsonpath.New("keys"), keys),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("version"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("keys"), keys),
					statecheck.ExpectKnownValue(fnAddr, tfjsonpath.New("secret_env").AtSliceIndex(0).AtMapKey("secret"), knownvalue.StringExact("acc-db")),
					statecheck.ExpectKnownValue(fnAddr, tfjsonpath.New("secret_files"), knownvalue.Null()),
				},
				Check: checkInvokeEventually(fnAddr, passwordHash("first-password")),
			},
			{
				// A rotation: an in-place update of the secret only; the function restarts.
				Config: secretConfig(src, "second-password"),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction(fnAddr, plancheck.ResourceActionNoop),
					plancheck.ExpectSensitiveValue(addr, tfjsonpath.New("data")),
					plancheck.ExpectUnknownValue(addr, tfjsonpath.New("version")),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("version"), knownvalue.Int64Exact(2)),
				},
				Check: checkInvokeEventually(fnAddr, passwordHash("second-password")),
			},
			{
				// No value comes back from the API: the import has none.
				Config:                  secretConfig(src, "second-password"),
				ResourceName:            addr,
				ImportState:             true,
				ImportStateId:           "acc-db",
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"data", "data_base64"},
			},
			{
				// Rotated outside Terraform: the refresh sees a new version and the plan writes
				// the configured values back.
				PreConfig: func() {
					if _, err := c.UpdateSecret(ctx, c.namespace, "acc-db", api.SecretFields{Data: map[string]string{"password": "changed-elsewhere"}}); err != nil {
						t.Fatal(err)
					}
				},
				Config: secretConfig(src, "second-password"),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(addr, tfjsonpath.New("keys"), keys),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("version"), knownvalue.Int64Exact(4)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("keys"), keys),
				},
				Check: checkInvokeEventually(fnAddr, passwordHash("second-password")),
			},
			{
				// A function outside Terraform uses the secret: its deletion is refused, naming it.
				PreConfig: func() {
					_, err := c.CreateFunction(ctx, c.namespace, api.CreateFunction{Name: "acc-secret-user", FunctionFields: api.FunctionFields{
						Runtime: new("python3.11"), SecretEnv: &[]api.SecretEnv{{Name: "PW", Secret: "acc-db", Key: "password"}}}})
					if err != nil {
						t.Fatal(err)
					}
				},
				Config:      nothing,
				ExpectError: regexp.MustCompile(`(?s)Secret\s+acc-db\s+is\s+still\s+in\s+use.*function\s+acc-secret-user.*sless_secret\.<label>\.name`),
			},
			{
				PreConfig: func() {
					if err := c.DeleteFunction(ctx, c.namespace, "acc-secret-user"); err != nil {
						t.Fatal(err)
					}
					if err := waitGone(ctx, "function acc-secret-user", func() error {
						_, err := c.GetFunction(ctx, c.namespace, "acc-secret-user")
						return err
					}); err != nil {
						t.Fatal(err)
					}
				},
				Config: nothing,
			},
		},
	})
}

// TestAccSecretExample applies examples/secrets with the Terraform CLI, rotates the
// password, and checks that no output of plan, apply or show prints a value. The value is
// in the state file, as Terraform keeps every sensitive attribute there (documented); only
// the output is checked.
func TestAccSecretExample(t *testing.T) {
	// A literal marker rather than a value Terraform already hides: the override makes the
	// variable non-sensitive, so only the provider's Sensitive flag keeps it out of sight.
	const first, second = "marker-f1rst-Pa55", "marker-s3cond-Pa55"
	cli := newTerraformCLI(t, filepath.Join(repoRoot, "terraform-provider-sless", "examples", "secrets"))
	override := "variable \"db_password\" {\n  sensitive = false\n}\n"
	if err := os.WriteFile(filepath.Join(cli.work, "test_override.tf"), []byte(override), 0o644); err != nil {
		t.Fatal(err)
	}
	cli.destroyAtEnd()
	noValue := func(what, out string) {
		t.Helper()
		for _, v := range []string{first, second} {
			if strings.Contains(out, v) {
				t.Fatalf("%s prints the secret value %q:\n%s", what, v, out)
			}
		}
	}
	withPassword := func(pw string) { cli.env = append(cli.env, "TF_VAR_db_password="+pw) }
	checkReader := func(pw string) {
		t.Helper()
		url := cli.outputs()["url"]
		want := passwordHash(pw)
		var body string
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
			status, b, err := invoke(url)
			var answer struct {
				User string `json:"user"`
				Hash string `json:"password_sha256"`
			}
			body = b
			if err == nil && status == 200 && json.Unmarshal([]byte(b), &answer) == nil && answer.User == "app" && answer.Hash == want {
				return
			}
		}
		t.Fatalf("invoking %s: %q, want user app and password_sha256 %s", url, body, want)
	}

	withPassword(first)
	out := cli.mustRun("apply", "-auto-approve", "-input=false", "-no-color")
	noValue("apply", out)
	if !strings.Contains(out, "(sensitive value)") {
		t.Fatalf("apply shows no (sensitive value) for the secret's data:\n%s", out)
	}
	if v := cli.outputs()["secret_version"]; v != "1" {
		t.Fatalf("secret_version %s, want 1", v)
	}
	checkReader(first)

	withPassword(second)
	out, err := cli.run("plan", "-detailed-exitcode", "-input=false", "-no-color")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("plan after a new password: %v, want exit code 2 (changes)\n%s", err, out)
	}
	noValue("plan", out)
	for _, want := range []string{"sless_secret.db will be updated in-place", "(sensitive value)", "1 to change"} {
		if !strings.Contains(out, want) {
			t.Fatalf("plan does not say %q:\n%s", want, out)
		}
	}
	out = cli.mustRun("apply", "-auto-approve", "-input=false", "-no-color")
	noValue("apply", out)
	if v := cli.outputs()["secret_version"]; v != "2" {
		t.Fatalf("secret_version %s after the rotation, want 2", v)
	}
	checkReader(second)

	noValue("show", cli.mustRun("show", "-no-color"))
	noValue("state show", cli.mustRun("state", "show", "-no-color", "sless_secret.db"))
	if out, err := cli.run("plan", "-detailed-exitcode", "-input=false", "-no-color"); err != nil {
		t.Fatalf("second plan: %v (exit code 2: changes)\n%s", err, out)
	}
}

// TestSecretValuesAreSensitive: the schema marks the values sensitive (plans show
// "(sensitive value)") and nothing else.
func TestSecretValuesAreSensitive(t *testing.T) {
	var resp resource.SchemaResponse
	NewSecretResource().Schema(context.Background(), resource.SchemaRequest{}, &resp)
	for name, a := range resp.Schema.Attributes {
		want := name == "data" || name == "data_base64"
		if a.IsSensitive() != want {
			t.Errorf("%s: sensitive %v, want %v", name, a.IsSensitive(), want)
		}
	}
	if _, ok := resp.Schema.Attributes["keys"].(schema.ListAttribute); !ok {
		t.Errorf("keys is %T, want a list", resp.Schema.Attributes["keys"])
	}
}

// TestSecretModelFrom: the values the state holds are kept unless the secret's version
// says someone else replaced them.
func TestSecretModelFrom(t *testing.T) {
	ctx := context.Background()
	data := types.MapValueMust(types.StringType, map[string]attr.Value{"password": types.StringValue("x")})
	sec := api.Secret{Name: "db", Namespace: "sless-abc", Version: 2, Keys: []string{"password"},
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), UpdatedAt: time.Date(2026, 2, 2, 3, 4, 5, 0, time.UTC)}
	tests := []struct {
		name     string
		version  types.Int64
		keep     bool
		warnings int
	}{
		{"state of the same version", types.Int64Value(2), true, 0},
		{"plan of a create or rotation", types.Int64Unknown(), true, 0},
		{"rotated outside Terraform", types.Int64Value(1), false, 1},
		{"just imported (no data)", types.Int64Null(), true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prior := secretModel{Data: data, DataBase64: types.MapNull(types.StringType), Version: tc.version}
			m, diags := secretModelFrom(ctx, sec, prior)
			if diags.HasError() || diags.WarningsCount() != tc.warnings {
				t.Fatalf("diagnostics %v, want %d warnings", diags, tc.warnings)
			}
			if m.Data.Equal(data) != tc.keep || !tc.keep && !m.Data.IsNull() {
				t.Fatalf("data %v, want kept=%v (else null)", m.Data, tc.keep)
			}
			if m.Version.ValueInt64() != 2 || m.ID.ValueString() != "sless-abc/db" || m.CreatedAt.ValueString() != "2026-01-02T03:04:05Z" || m.UpdatedAt.ValueString() != "2026-02-02T03:04:05Z" {
				t.Fatalf("model %+v", m)
			}
		})
	}
}
