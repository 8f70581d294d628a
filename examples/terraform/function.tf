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
