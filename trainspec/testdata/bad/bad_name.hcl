train "my_model" {
  entrypoint { builtin = "quickstart" }
}
