# Fine-tuning: a run that starts from another run's checkpoint (Ray's
# resume_from_checkpoint). Run the quickstart first (examples/quickstart);
# this trains its last checkpoint on to epoch 30 at a fifth of the learning
# rate, as a run of its own: the records, checkpoints and failure budget are
# this run's, and the quickstart's checkpoint is only read.
train "quickstart-finetune" {
  entrypoint {
    builtin = "quickstart"
  }

  config = {
    epochs     = 30
    batch_size = 64
    lr         = 0.01
  }

  scaling {
    num_workers = 4

    resources_per_worker {
      cpu    = 500
      memory = 256
    }
  }

  run {
    storage_path = "./results"

    checkpoint {
      # A checkpoint directory, or a checkpoint's s3:// location as run,
      # tune and status print it (for a run kept on S3). Used while this
      # run has no checkpoint of its own; after that a restart resumes from
      # the run's latest, as any run does.
      resume_from = "./results/quickstart/checkpoint_000019"

      num_to_keep     = 2
      score_attribute = "loss"
      score_order     = "min"
    }

    failure {
      max_failures = 2
    }
  }
}
