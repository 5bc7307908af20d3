train "x" {
  entrypoint { builtin = "quickstart" }
  scaling {
    num_workers = 2
  }
  scaling {
    num_workers = 3
  }
}
