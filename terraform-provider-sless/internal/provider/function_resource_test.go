package provider

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"sless.dev/sless/buildkit/sourcezip"
	"sless.dev/sless/rules"
)

// goHandler is a Go handler answering with version and the GREETING variable.
func goHandler(version string) string {
	return fmt.Sprintf(`package handler

import "os"

func Handle(event map[string]interface{}) interface{} {
	return %q + " " + os.Getenv("GREETING")
}
`, version)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// functionBlock declares the Go function name as resource sless_function.<label>, with its
// code in dir and env inside its env_vars; extra lines go into its block.
func functionBlock(label, name, dir, env string, extra ...string) string {
	return fmt.Sprintf(`
resource "sless_function" %q {
  name       = %q
  runtime    = "go1.23"
  source_dir = %q
  env_vars   = { %s }
  %s
}
`, label, name, dir, env, strings.Join(extra, "\n  "))
}

// functionConfig declares one function and reads it back with the data source; extra lines
// go into its block.
func functionConfig(name, dir, greeting string, extra ...string) string {
	return functionBlock("test", name, dir, fmt.Sprintf("GREETING = %q", greeting), extra...) + `
data "sless_function" "test" {
  name = sless_function.test.name
}
`
}

// checkInvoke calls the function's url from the state and expects body.
func checkInvoke(address, want string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs, ok := s.RootModule().Resources[address]
		if !ok {
			return fmt.Errorf("%s not in state", address)
		}
		status, body, err := invoke(rs.Primary.Attributes["url"])
		if err != nil {
			return err
		}
		if status != 200 || body != want {
			return fmt.Errorf("invoking %s: %d %q, want 200 %q", rs.Primary.Attributes["url"], status, body, want)
		}
		return nil
	}
}

// checkGone asserts that destroy left no function, trigger, job or secret on the server.
func checkGone(d *slessDev, t *testing.T) resource.TestCheckFunc {
	return func(*terraform.State) error {
		c := d.client(t)
		ctx := context.Background()
		fns, err := c.ListFunctions(ctx, c.namespace)
		if err != nil {
			return err
		}
		trs, err := c.ListTriggers(ctx, c.namespace)
		if err != nil {
			return err
		}
		jobs, err := c.ListJobs(ctx, c.namespace)
		if err != nil {
			return err
		}
		secrets, err := c.ListSecrets(ctx, c.namespace)
		if err != nil {
			return err
		}
		if len(fns)+len(trs)+len(jobs)+len(secrets) > 0 {
			return fmt.Errorf("left behind: %d functions, %d triggers, %d jobs, %d secrets", len(fns), len(trs), len(jobs), len(secrets))
		}
		return nil
	}
}

func TestAccFunction(t *testing.T) {
	d := sless(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "handler.go"), goHandler("v1"))
	hashOf := func() string {
		h, err := sourcezip.Hash(src)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	v1Hash := hashOf()
	const addr = "sless_function.test"
	rolledBack := functionConfig("acc-fn", src, "canary", `traffic = [{ revision = "acc-fn-3", percent = 100 }]`)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             checkGone(d, t),
		Steps: []resource.TestStep{
			{
				Config: functionConfig("acc-fn", src, "hello"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("phase"), knownvalue.StringExact("Ready")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("source_hash"), knownvalue.StringExact(v1Hash)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("timeout_sec"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("memory_mb"), knownvalue.Int64Exact(128)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("async_max_jobs"), knownvalue.Int64Exact(10)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("stream_idle_timeout_sec"), knownvalue.Int64Exact(60)),
					statecheck.ExpectKnownValue("data.sless_function.test", tfjsonpath.New("ready"), knownvalue.Bool(true)),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkInvoke(addr, "v1 hello"),
					resource.TestCheckResourceAttrPair(addr, "url", "data.sless_function.test", "url"),
					resource.TestMatchResourceAttr(addr, "url", regexp.MustCompile(`^http://127\.0\.0\.1:\d+/fn/sless-[0-9a-f]{16}/acc-fn$`)),
				),
			},
			{
				// An edit of a file under source_dir is a planned in-place change that rebuilds.
				PreConfig: func() { writeFile(t, filepath.Join(src, "handler.go"), goHandler("v2")) },
				Config:    functionConfig("acc-fn", src, "hello"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue(addr, tfjsonpath.New("source_hash"), knownvalue.StringFunc(func(v string) error {
						if v == v1Hash {
							return fmt.Errorf("source_hash did not change after an edit")
						}
						return nil
					})),
					plancheck.ExpectUnknownValue(addr, tfjsonpath.New("image")),
				}},
				Check: checkInvoke(addr, "v2 hello"),
			},
			{
				// An environment change updates in place (no replacement, no new upload).
				Config: functionConfig("acc-fn", src, "world"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				Check: checkInvoke(addr, "v2 world"),
			},
			{
				// Asynchronous invocations on, with their retry policy; a stream idle bound.
				Config: functionConfig("acc-fn", src, "world", "async_enabled = true", "async_max_attempts = 4", "async_backoff_ms = 50", "async_max_jobs = 3",
					"stream_idle_timeout_sec = 5"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("async_enabled"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("async_max_attempts"), knownvalue.Int64Exact(4)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("async_max_jobs"), knownvalue.Int64Exact(3)),
					statecheck.ExpectKnownValue("data.sless_function.test", tfjsonpath.New("async_backoff_ms"), knownvalue.Int64Exact(50)),
					statecheck.ExpectKnownValue("data.sless_function.test", tfjsonpath.New("async_max_jobs"), knownvalue.Int64Exact(3)),
					statecheck.ExpectKnownValue("data.sless_function.test", tfjsonpath.New("stream_idle_timeout_sec"), knownvalue.Int64Exact(5)),
				},
				Check: func(*terraform.State) error {
					c := d.client(t)
					fn, err := c.GetFunction(context.Background(), c.namespace, "acc-fn")
					if err != nil {
						return err
					}
					if a := fn.Async; !a.Enabled || a.MaxAttempts != 4 || a.BackoffMs != 50 || a.MaxJobs != 3 {
						return fmt.Errorf("the API has async %+v", a)
					}
					if fn.StreamIdleTimeoutSec != 5 {
						return fmt.Errorf("the API has stream_idle_timeout_sec %d, want 5", fn.StreamIdleTimeoutSec)
					}
					return nil
				},
			},
			{
				// Removing the attributes turns it off again.
				Config: functionConfig("acc-fn", src, "world"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("async_enabled"), knownvalue.Bool(false)),
				},
			},
			{
				// A rollout policy is a setting: no revision, kept by the API as sent.
				Config: functionConfig("acc-fn", src, "world", `rollout = { steps = [10, 50, 100], interval_sec = 60, max_error_rate = 0.05, min_requests = 20 }`),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("rollout").AtMapKey("steps"),
						knownvalue.ListExact([]knownvalue.Check{knownvalue.Int64Exact(10), knownvalue.Int64Exact(50), knownvalue.Int64Exact(100)})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("latest_created_revision"), knownvalue.StringExact("acc-fn-3")),
				},
				Check: func(*terraform.State) error {
					c := d.client(t)
					fn, err := c.GetFunction(context.Background(), c.namespace, "acc-fn")
					if err != nil {
						return err
					}
					if r := fn.Rollout; r == nil || r.IntervalSec != 60 || r.MaxErrorRate != 0.05 || r.MinRequests != 20 {
						return fmt.Errorf("the API has rollout %+v", r)
					}
					return nil
				},
			},
			{
				// A canary: the new environment is a revision (acc-fn-4) with half the calls
				// and a tag; acc-fn-3 keeps the other half.
				Config: functionConfig("acc-fn", src, "canary", `traffic = [{ revision = "acc-fn-3", percent = 50 }, { latest = true, percent = 50, tag = "canary" }]`) + revisionsData,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("latest_ready_revision"), knownvalue.StringExact("acc-fn-4")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("latest_created_revision"), knownvalue.StringExact("acc-fn-4")),
					statecheck.ExpectKnownValue("data.sless_function_revisions.test", tfjsonpath.New("revisions").AtSliceIndex(3).AtMapKey("tags"),
						knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("canary")})),
				},
				Check: checkSplit(addr, map[string]string{"v2 world": "acc-fn-3", "v2 canary": "acc-fn-4"}),
			},
			{
				// Rolled back by changing traffic: every call on acc-fn-3 again, nothing rebuilt.
				Config: rolledBack,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("latest_ready_revision"), knownvalue.StringExact("acc-fn-4")),
				},
				Check: checkSplit(addr, map[string]string{"v2 world": "acc-fn-3"}),
			},
			{
				Config:            rolledBack,
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     "acc-fn",
				ImportStateVerify: true,
				// The code's location and hash are configuration, not something the API knows.
				ImportStateVerifyIgnore: []string{"source_dir", "source_hash"},
			},
			{
				Config:   rolledBack,
				PlanOnly: true, // steady state: nothing to do
			},
		},
	})
}

// revisionsData reads sless_function.test's revisions.
const revisionsData = `
data "sless_function_revisions" "test" {
  function = sless_function.test.name
  depends_on = [sless_function.test]
}
`

// checkSplit calls the function's url 60 times and wants every answer to be one of the
// bodies in want, each from its revision (X-Sless-Revision), and each body at least once.
func checkSplit(address string, want map[string]string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		url := s.RootModule().Resources[address].Primary.Attributes["url"]
		seen := map[string]int{}
		for range 60 {
			resp, err := http.Post(url, "application/json", strings.NewReader(`{}`))
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			rev, ok := want[string(body)]
			if resp.StatusCode != 200 || !ok || resp.Header.Get(rules.HeaderRevision) != rev {
				return fmt.Errorf("call: %d %q from %q, want one of %v", resp.StatusCode, body, resp.Header.Get(rules.HeaderRevision), want)
			}
			seen[string(body)]++
		}
		if len(seen) != len(want) {
			return fmt.Errorf("answers %v, want each of %v", seen, want)
		}
		return nil
	}
}

func TestAccFunctionBuildError(t *testing.T) {
	d := sless(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "handler.go"), "package handler\n\nfunc Handle(event map[string]interface{}) interface{} {\n\treturn undefinedThing\n}\n")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             checkGone(d, t),
		Steps: []resource.TestStep{{
			Config:      functionConfig("acc-broken", src, "x"),
			ExpectError: regexp.MustCompile(`(?s)failed to build.*handler\.go.*undefined: undefinedThing`),
		}},
	})
}

// TestAccFunctionCodePath deploys a prepared zip; a new code_hash uploads it again.
func TestAccFunctionCodePath(t *testing.T) {
	d := sless(t)
	zipPath := filepath.Join(t.TempDir(), "handler.zip")
	writeZip := func(version string) {
		src := t.TempDir()
		writeFile(t, filepath.Join(src, "handler.go"), goHandler(version))
		data, _, err := sourcezip.Zip(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(zipPath, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	config := fmt.Sprintf(`
resource "sless_function" "zip" {
  name        = "acc-zip"
  runtime     = "go1.25"
  code_path   = %[1]q
  code_hash   = filesha256(%[1]q)
  timeout_sec = 0
  env_vars    = { GREETING = "zipped" }
}
`, zipPath)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             checkGone(d, t),
		Steps: []resource.TestStep{
			{
				PreConfig: func() { writeZip("zip-v1") },
				Config:    config,
				ConfigStateChecks: []statecheck.StateCheck{
					// An explicit 0 (no limit) stays 0; unset would stay null.
					statecheck.ExpectKnownValue("sless_function.zip", tfjsonpath.New("timeout_sec"), knownvalue.Int64Exact(0)),
				},
				Check: checkInvoke("sless_function.zip", "zip-v1 zipped"),
			},
			{
				PreConfig: func() { writeZip("zip-v2") },
				Config:    config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("sless_function.zip", plancheck.ResourceActionUpdate),
				}},
				Check: checkInvoke("sless_function.zip", "zip-v2 zipped"),
			},
		},
	})
}
