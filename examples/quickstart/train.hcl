# The quickstart: four workers train the built-in regression model with ring
# all-reduce. Runs on a laptop with `nomad-train run`, and on a Nomad cluster
# once storage_path names a shared directory.
train "quickstart" {
  entrypoint {
    builtin = "quickstart"
  }

  # The train loop config reaches every worker as JSON.
  config = {
    epochs     = 20
    batch_size = 64
    lr         = 0.05
  }

  scaling {
    num_workers = 4

    resources_per_worker {
      cpu    = 500
      memory = 256
    }
  }

  run {
    # Relative to where the workers run. On a cluster every worker must see
    # one directory at the same path (NFS, a host or CSI volume): set an
    # absolute path there, or the run stops at start-up saying so.
    storage_path = "./results"

    checkpoint {
      num_to_keep     = 2
      score_attribute = "loss"
      score_order     = "min"
    }

    failure {
      max_failures = 2
    }
  }
}
