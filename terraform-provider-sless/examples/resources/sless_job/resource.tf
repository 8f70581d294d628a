# Runs the function report once with this event; raise run_id to run it again
# (0 creates the job without running it). apply waits for the run and keeps its result.
resource "sless_job" "backfill" {
  name             = "backfill-2026-12"
  function         = sless_function.report.name
  event_json       = jsonencode({ month = "2026-12" })
  memory_mb        = 512
  timeout_sec      = 900
  wait_timeout_sec = 1200
  run_id           = 1
}

output "backfill_result" {
  value = sless_job.backfill.result
}
