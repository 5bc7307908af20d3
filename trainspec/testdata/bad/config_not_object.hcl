train "x" {
  entrypoint { builtin = "quickstart" }
  config = [1, 2, 3]
}
