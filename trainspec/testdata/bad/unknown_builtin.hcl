train "x" {
  entrypoint {
    builtin = "quickstrat"
  }
}
