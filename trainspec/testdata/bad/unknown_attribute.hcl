train "x" {
  entrypoint { builtin = "quickstart" }
  scaling {
    num_worker = 4
  }
}
