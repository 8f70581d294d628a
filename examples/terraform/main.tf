# A function built from ./hello (function.tf), reachable over HTTP and fired every morning by
# cron (triggers.tf), and run once as a job (jobs.tf). Run it against `sless dev` without a
# registry: see README.md. The provider's reference pages show function.tf, triggers.tf and
# jobs.tf themselves (terraform-provider-sless/examples/resources links to them).

terraform {
  required_providers {
    sless = {
      source = "sless.dev/sless/sless"
    }
  }
}

# endpoint and token default to SLESS_ENDPOINT and SLESS_TOKEN, which `sless dev` prints.
provider "sless" {}

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
