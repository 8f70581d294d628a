package provider

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// A data source read forces the provider to configure, which is where the endpoint and
// token are checked.
const lookupConfig = `
provider "sless" {
  endpoint = %q
  token    = %q
}

data "sless_function" "x" {
  name = "anything"
}
`

func TestAccProviderConfigErrors(t *testing.T) {
	d := sless(t)
	// A port that was free a moment ago: nothing answers there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	tests := []struct {
		name, endpoint, token string
		want                  *regexp.Regexp
	}{
		{"unreachable endpoint", closed, d.token, regexp.MustCompile(`(?s)Cannot reach sless.*No answer from ` + regexp.QuoteMeta(closed) + `.*connection refused`)},
		{"refused token", d.endpoint, "not-a-jwt", regexp.MustCompile(`(?s)sless refused the token.*401`)},
		{"not a URL", "127.0.0.1:8080", d.token, regexp.MustCompile(`(?s)Invalid sless endpoint.*want an http:// or https:// URL`)},
		{"found, but no such function", d.endpoint, d.token, regexp.MustCompile(`(?s)Function not found.*No function anything in namespace sless-`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: protoV6Providers,
				Steps: []resource.TestStep{{
					Config:      fmt.Sprintf(lookupConfig, tc.endpoint, tc.token),
					ExpectError: tc.want,
				}},
			})
		})
	}
}

func TestAccProviderMissingEndpoint(t *testing.T) {
	sless(t)
	t.Setenv("SLESS_ENDPOINT", "")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		Steps: []resource.TestStep{{
			Config:      `data "sless_function" "x" { name = "anything" }`,
			ExpectError: regexp.MustCompile(`(?s)Missing sless endpoint.*SLESS_ENDPOINT`),
		}},
	})
}

// TestAccPlanTimeValidation checks that bad input fails `terraform plan` with the attribute
// named, before anything is sent to the server.
func TestAccPlanTimeValidation(t *testing.T) {
	sless(t)
	src := t.TempDir()
	writeFile(t, src+"/handler.go", goHandler("v1"))
	fn := func(attrs string) string {
		return fmt.Sprintf("resource \"sless_function\" \"x\" {\n  source_dir = %q\n%s\n}\n", src, attrs)
	}
	trigger := func(attrs string) string {
		return fmt.Sprintf("resource \"sless_trigger\" \"x\" {\n  name = \"t\"\n  function = \"f\"\n%s\n}\n", attrs)
	}
	tests := []struct {
		name, config string
		want         string
	}{
		{"uppercase name", fn(`name = "Hello"` + "\n" + `runtime = "go1.23"`), `Attribute name must be lowercase letters`},
		{"name too long", fn(`name = "` + strings.Repeat("a", 64) + `"` + "\n" + `runtime = "go1.23"`), `string length must be between 1 and 63`},
		{"unknown runtime", fn(`name = "x"` + "\n" + `runtime = "go1.19"`), `runtime value must be one of`},
		{"timeout above 900", fn(`name = "x"` + "\n" + `runtime = "go1.23"` + "\n" + `timeout_sec = 901`), `timeout_sec value must be between 0 and 900`},
		{"negative timeout", fn(`name = "x"` + "\n" + `runtime = "go1.23"` + "\n" + `timeout_sec = -1`), `timeout_sec value must be between 0 and 900`},
		{"reserved env var", fn(`name = "x"` + "\n" + `runtime = "go1.23"` + "\n" + `env_vars = { SLESS_MODE = "x" }`), `SLESS_ prefix is reserved`},
		{"source_dir and code_path", fn(`name = "x"` + "\n" + `runtime = "go1.23"` + "\n" + `code_path = "a.zip"` + "\n" + `code_hash = "x"`), `Exactly one of these attributes must be configured: [source_dir,code_path]`},
		{"code_path without code_hash", `resource "sless_function" "x" {
  name = "x"
  runtime = "go1.23"
  code_path = "a.zip"
}`, `Attribute "code_hash" must be specified when "code_path" is specified`},
		{"missing source_dir", `resource "sless_function" "x" {
  name = "x"
  runtime = "go1.23"
  source_dir = "/nonexistent/sless-src"
}`, `Cannot read source_dir`},
		{"bad cron", trigger(`type = "cron"` + "\n" + `schedule = "every day"`), `Invalid cron schedule`},
		{"@every, which the API refuses", trigger(`type = "cron"` + "\n" + `schedule = "@every 5m"`), `@every intervals are not supported`},
		{"cron without schedule", trigger(`type = "cron"`), `A cron trigger needs schedule`},
		{"schedule on http", trigger(`type = "http"` + "\n" + `schedule = "@daily"`), `schedule is a cron trigger setting`},
		{"bad timezone", trigger(`type = "cron"` + "\n" + `schedule = "@daily"` + "\n" + `timezone = "Mars/Base"`), `unknown time zone "Mars/Base"`},
		{"unknown trigger type", trigger(`type = "webhook"`), `type value must be one of`},
		{"job event not JSON", `resource "sless_job" "x" {
  name = "j"
  function = "f"
  event_json = "{not json"
}`, `Invalid event JSON`},
		{"job with function and runtime", `resource "sless_job" "x" {
  name = "j"
  function = "f"
  runtime = "go1.23"
  image = "x"
}`, `Exactly one of these attributes must be configured: [function,runtime]`},
		{"job with function and code", `resource "sless_job" "x" {
  name = "j"
  function = "f"
  source_dir = "./src"
}`, `Code on a job that runs a function`},
		{"self-contained job without code", `resource "sless_job" "x" {
  name = "j"
  runtime = "python3.12"
}`, `Self-contained job without code`},
		{"self-contained job with two kinds of code", `resource "sless_job" "x" {
  name = "j"
  runtime = "python3.12"
  source_dir = "./src"
  image = "registry.example/job:1"
}`, `More than one kind of code`},
		{"negative run_id", `resource "sless_job" "x" {
  name = "j"
  function = "f"
  run_id = -1
}`, `run_id value must be at least 0`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: protoV6Providers,
				Steps: []resource.TestStep{{
					Config:      tc.config,
					PlanOnly:    true,
					ExpectError: regexp.MustCompile(`(?s)` + regexp.QuoteMeta(tc.want)),
				}},
			})
		})
	}
}
