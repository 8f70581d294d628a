# A secret and a function that reads it (reader/). The value comes from a variable, e.g.
# TF_VAR_db_password, so it is never written in the configuration. See README.md.

variable "db_password" {
  type      = string
  sensitive = true
}

# Values are write-only and sensitive: the API never returns them and plans show
# (sensitive value). Changing one rotates the secret (version + 1) and restarts the
# functions that use it.
resource "sless_secret" "db" {
  name = "db"
  data = {
    username = "app"
    password = var.db_password
  }
}

# secret_env sets variables from keys of the secret. Referring to sless_secret.db.name
# (rather than "db") makes Terraform create the secret first and destroy it last.
resource "sless_function" "reader" {
  name       = "db-reader"
  runtime    = "python3.11"
  source_dir = "${path.module}/reader"
  secret_env = [
    { name = "DB_USER", secret = sless_secret.db.name, key = "username" },
    { name = "DB_PASSWORD", secret = sless_secret.db.name, key = "password" },
  ]
}

output "url" {
  value = sless_function.reader.url
}

output "secret_version" {
  value = sless_secret.db.version
}
