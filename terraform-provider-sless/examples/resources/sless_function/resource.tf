# A Node.js API built from ./api with one instance kept warm. Each change to what runs is a
# revision api-<n>; here 90 % of the calls stay on api-3 while the newest takes 10 %, and the
# tag canary reaches it directly (header X-Sless-Tag: canary).
resource "sless_function" "api" {
  name         = "api"
  runtime      = "nodejs22"
  source_dir   = "${path.module}/api"
  memory_mb    = 256
  min_replicas = 1
  max_replicas = 20
  traffic = [
    { revision = "api-3", percent = 90 },
    { latest = true, percent = 10, tag = "canary" },
  ]
}

# A prepared zip instead of a directory, its secrets mounted as files, and calls that may
# also be queued (Prefer: respond-async) with five attempts each.
resource "sless_function" "worker" {
  name               = "worker"
  runtime            = "python3.12"
  code_path          = "${path.module}/worker.zip"
  code_hash          = filesha256("${path.module}/worker.zip")
  timeout_sec        = 300
  secret_files       = [{ secret = sless_secret.tls.name, path = "/var/sless/tls" }]
  async_enabled      = true
  async_max_attempts = 5
}
