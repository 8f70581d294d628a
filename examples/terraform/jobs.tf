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
