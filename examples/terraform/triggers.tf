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
