train "x" {
  entrypoint { builtin = "quickstart" }
  scaling {
    use_gpu = true
    resources_per_worker {
      memory = "16 gigs"
      gpu_affinity {
        attribute = "model"
        value     = "A100"
        weight    = 0
      }
    }
  }
}
