train "x" {
  entrypoint {
    builtin = "quickstart"
    command = "local/train"
  }
}
