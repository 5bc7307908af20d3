# Tune the quickstart's learning rate and batch size: 8 samples, two trials
# at a time, ASHA stopping the poor ones early. Run it with
#   nomad-train tune examples/tune/train.hcl
train "quickstart-tune" {
  entrypoint {
    builtin = "quickstart"
  }

  config = {
    lr         = loguniform(0.001, 0.1)
    batch_size = choice([16, 32, 64])
    epochs     = 9
  }

  scaling {
    num_workers = 2
  }

  run {
    storage_path = "./results"
  }

  tune {
    num_samples           = 8
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
    seed                  = 7

    scheduler {
      type             = "asha"
      max_t            = 9
      grace_period     = 1
      reduction_factor = 3
    }
  }
}
