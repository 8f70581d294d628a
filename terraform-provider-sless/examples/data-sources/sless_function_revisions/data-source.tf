# The function's revisions (hello-1, hello-2, ...), each with its share of the calls and tags.
data "sless_function_revisions" "hello" {
  function   = sless_function.hello.name
  depends_on = [sless_function.hello]
}
