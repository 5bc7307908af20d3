train "x" {
  entrypoint { builtin = "quickstart"
}
