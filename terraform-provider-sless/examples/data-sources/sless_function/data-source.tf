# Another configuration can look the function up by name.
data "sless_function" "hello" {
  name = sless_function.hello.name
}
