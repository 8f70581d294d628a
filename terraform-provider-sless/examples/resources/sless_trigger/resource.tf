# Only callers with a valid token reach the function over HTTP.
resource "sless_trigger" "private" {
  name         = "orders-http"
  type         = "http"
  function     = sless_function.orders.name
  require_auth = true
}

# Every hour, with the function woken a minute before each tick so it pays no cold start.
resource "sless_trigger" "hourly" {
  name            = "orders-hourly"
  type            = "cron"
  function        = sless_function.orders.name
  schedule        = "@hourly"
  prewarm_seconds = 60
}

# Each message of the queue <namespace>.orders calls the function; after five failed
# deliveries it goes to <namespace>.orders-failed (a tenant's queues start with its namespace). The broker's URL comes from a secret, never from the configuration.
resource "sless_trigger" "queue" {
  name              = "orders-queue"
  type              = "event"
  function          = sless_function.orders.name
  queue             = "${sless_function.orders.namespace}.orders"
  broker_secret     = sless_secret.broker.name
  max_attempts      = 5
  dead_letter_queue = "${sless_function.orders.namespace}.orders-failed"
}
