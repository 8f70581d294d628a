package provider

import (
	"fmt"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

// jobHandler echoes the event's n and counts its runs at the test's RUNS_URL, so a re-run is
// visible. Over HTTP, not a file: sless dev's sandbox shows a function no host path.
const jobHandler = `package handler

import (
	"fmt"
	"net/http"
	"os"
)

func Handle(event map[string]interface{}) interface{} {
	if event["fail"] == true {
		panic("asked to fail")
	}
	resp, err := http.Post(os.Getenv("RUNS_URL"), "text/plain", nil)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Fprintln(os.Stderr, "processing", event["n"])
	return map[string]interface{}{"n": event["n"], "ok": true}
}
`

func jobConfig(dir string, runs *runCounter, runID int) string {
	return jobConfigEvent(dir, runs, runID, "{ n = 42 }")
}

func jobConfigEvent(dir string, runs *runCounter, runID int, event string) string {
	return functionBlock("fn", "acc-job-fn", dir, fmt.Sprintf("RUNS_URL = %q", runs.URL)) + fmt.Sprintf(`
resource "sless_job" "test" {
  name       = "acc-job"
  function   = sless_function.fn.name
  event_json = jsonencode(%[2]s)
  run_id     = %[1]d
}
`, runID, event)
}

func TestAccJob(t *testing.T) {
	d := sless(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "handler.go"), jobHandler)
	runs := newRunCounter(t)
	const addr = "sless_job.test"
	// reRun raises run_id to runID: an in-place update that runs the job again.
	reRun := func(runID int, checks ...statecheck.StateCheck) resource.TestStep {
		return resource.TestStep{
			Config: jobConfig(src, runs, runID),
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				plancheck.ExpectUnknownValue(addr, tfjsonpath.New("result")),
			}},
			ConfigStateChecks: append([]statecheck.StateCheck{
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("phase"), knownvalue.StringExact("Succeeded")),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("observed_run_id"), knownvalue.Int64Exact(int64(runID))),
			}, checks...),
			Check: checkRuns(runs, runID),
		}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             checkGone(d, t),
		Steps: []resource.TestStep{
			{
				// run_id 0: created, not run.
				Config: jobConfig(src, runs, 0),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("phase"), knownvalue.StringExact("Skipped")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("result"), knownvalue.StringExact("")),
				},
				Check: checkRuns(runs, 0),
			},
			reRun(1,
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("result"), knownvalue.StringRegexp(regexp.MustCompile(`^\{"n":42,"ok":true\}\s*$`))),
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("output"), knownvalue.StringRegexp(regexp.MustCompile(`processing 42`))),
			),
			reRun(2),
			{
				// Applying again without raising run_id does not run the job.
				Config:   jobConfig(src, runs, 2),
				PlanOnly: true,
			},
			{
				Config:            jobConfig(src, runs, 2),
				ResourceName:      addr,
				ImportState:       true,
				ImportStateId:     "acc-job",
				ImportStateVerify: true,
			},
			{
				// Lowering run_id starts over: the job is replaced and not run.
				Config: jobConfig(src, runs, 0),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionDestroyBeforeCreate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("phase"), knownvalue.StringExact("Skipped")),
				},
				Check: checkRuns(runs, 2),
			},
		},
	})
}

// TestAccJobFailure: a run that fails fails the apply with the handler's error and output.
func TestAccJobFailure(t *testing.T) {
	d := sless(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "handler.go"), jobHandler)
	runs := newRunCounter(t)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             checkGone(d, t),
		Steps: []resource.TestStep{{
			Config:      jobConfigEvent(src, runs, 1, "{ fail = true }"),
			ExpectError: regexp.MustCompile(`(?s)Run 1 of job acc-job failed.*asked to fail`),
		}},
	})
}

func selfContainedJobConfig(dir string, runID int) string {
	return fmt.Sprintf(`
resource "sless_job" "own" {
  name       = "acc-own-job"
  runtime    = "go1.23"
  source_dir = %[1]q
  env_vars   = { GREETING = "self-contained" }
  event_json = jsonencode({})
  run_id     = %[2]d
}
`, dir, runID)
}

// TestAccJobSelfContained: a job with its own code is built and run; new code with a raised
// run_id runs the new code.
func TestAccJobSelfContained(t *testing.T) {
	d := sless(t)
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "handler.go"), goHandler("own-v1"))
	const addr = "sless_job.own"
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             checkGone(d, t),
		Steps: []resource.TestStep{
			{
				Config: selfContainedJobConfig(src, 1),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("phase"), knownvalue.StringExact("Succeeded")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("result"), knownvalue.StringRegexp(regexp.MustCompile(`^"?own-v1 self-contained"?\s*$`))),
				},
			},
			{
				PreConfig: func() { writeFile(t, filepath.Join(src, "handler.go"), goHandler("own-v2")) },
				Config:    selfContainedJobConfig(src, 2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("observed_run_id"), knownvalue.Int64Exact(2)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("result"), knownvalue.StringRegexp(regexp.MustCompile(`^"?own-v2 self-contained"?\s*$`))),
				},
			},
			{
				Config:                  selfContainedJobConfig(src, 2),
				ResourceName:            addr,
				ImportState:             true,
				ImportStateId:           "acc-own-job",
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"source_dir", "source_hash"},
			},
		},
	})
}
