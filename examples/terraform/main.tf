# A function built from ./hello, reachable over HTTP, fired every morning by cron, and run
# once as a job. Run it against `sless dev` without a registry: see README.md.

terraform {
  required_providers {
    sless = {
      source = "sless.dev/sless/sless"
    }
  }
}

# endpoint and token default to SLESS_ENDPOINT and SLESS_TOKEN, which `sless dev` prints.
provider "sless" {}

# The provider zips ./hello and hashes every file in it, so an edit shows in `terraform plan`
# and `apply` rebuilds; apply fails with the compiler output when the build fails.
resource "sless_function" "hello" {
  name       = "hello"
  runtime    = "go1.23"
  source_dir = "${path.module}/hello"
  env_vars = {
    GREETING     = "Hello"
    DEFAULT_NAME = "world"
  }
  memory_mb    = 128
  timeout_sec  = 30 # leave unset (null) or 0 for no limit
  min_replicas = 0  # scale to zero when idle
  max_replicas = 3
  # Each change to what runs is a revision hello-<n>. To try one on a slice of the calls:
  # traffic = [{ revision = "hello-1", percent = 90 }, { latest = true, percent = 10, tag = "canary" }]
}

# Public HTTP entry; `enabled = false` freezes the function in place (calls get 503).
resource "sless_trigger" "web" {
  name     = "hello-web"
  type     = "http"
  function = sless_function.hello.name
  enabled  = true
}

# Fires the function at 07:30 Berlin time on weekdays.
resource "sless_trigger" "morning" {
  name     = "hello-morning"
  type     = "cron"
  function = sless_function.hello.name
  schedule = "30 7 * * 1-5"
  timezone = "Europe/Berlin"
}

# A one-off run with an event; raise run_id to run it again, 0 creates it without running.
resource "sless_job" "greet_once" {
  name       = "hello-once"
  function   = sless_function.hello.name
  event_json = jsonencode({ name = "Terraform" })
  run_id     = 1
}

# A self-contained job brings its own code (built like a function's) instead of a function.
resource "sless_job" "report" {
  name       = "hello-report"
  runtime    = "go1.23"
  source_dir = "${path.module}/hello"
  env_vars = {
    GREETING     = "Report"
    DEFAULT_NAME = "ops"
  }
  event_json = jsonencode({})
  run_id     = 1
}

# Another configuration can look the function up by name.
data "sless_function" "hello" {
  name = sless_function.hello.name
}

# The function's revisions (hello-1, hello-2, ...), each with its share of the calls and tags.
data "sless_function_revisions" "hello" {
  function   = sless_function.hello.name
  depends_on = [sless_function.hello]
}

output "revisions" {
  value = [for r in data.sless_function_revisions.hello.revisions : "${r.name} ${r.phase} ${r.percent}%"]
}

output "url" {
  value = sless_trigger.web.url
}

output "job_result" {
  value = sless_job.greet_once.result
}

output "report_result" {
  value = sless_job.report.result
}

output "phase" {
  value = data.sless_function.hello.phase
}
