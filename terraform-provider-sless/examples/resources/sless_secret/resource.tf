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
