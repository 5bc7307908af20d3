train "my.model" {
  entrypoint { builtin = "quickstart" }
}
