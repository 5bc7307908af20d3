train "x" {
  entrypoint { builtin = "quickstart" }
  scaling {
    num_workers = 0
  }
}
