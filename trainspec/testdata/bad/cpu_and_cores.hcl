train "x" {
  entrypoint { builtin = "quickstart" }
  scaling {
    resources_per_worker {
      cpu   = 1000
      cores = 2
    }
  }
}
