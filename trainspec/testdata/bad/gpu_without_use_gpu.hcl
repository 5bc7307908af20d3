train "x" {
  entrypoint { builtin = "quickstart" }
  scaling {
    num_workers = 2
    resources_per_worker {
      gpu = 1
      gpu_constraint {
        attribute = "memory"
        operator  = ">="
        value     = "40 GiB"
      }
    }
  }
}
