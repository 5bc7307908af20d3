train "x" {
  entrypoint {
    builtin = "quickstart"
    artifact {
      destination = "local/"
    }
  }
}
