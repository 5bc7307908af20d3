# Eight GPU workers, two GPUs each with at least 40 GiB, spread across nodes.
# The storage path must be a directory every client mounts (NFS, for example).

variable "workers" {
  type        = number
  default     = 8
  description = "Number of workers (one Nomad allocation each)."
}

variable "lr" {
  type    = number
  default = 0.002
}

train "mnist-gpu" {
  datacenters = ["dc1", "dc2"]
  namespace   = "ml"
  node_pool   = "gpu"
  priority    = 70

  meta = {
    team = "vision"
  }

  env = {
    NCCL_DEBUG = "WARN"
  }

  entrypoint {
    builtin = "mnist-cnn" # builtins compute on the CPU; a command (python3 train.py) gets the GPUs
  }

  config = {
    lr         = var.lr
    epochs     = 10
    batch_size = 512
    channels   = 16
    data_dir   = "/mnt/shared/mnist" # MNIST's IDX files (see examples/mnist/train.hcl)
  }

  scaling {
    num_workers        = var.workers
    use_gpu            = true
    placement_strategy = "SPREAD"

    resources_per_worker {
      cores     = 8
      memory    = "64 GiB"
      gpu       = 2
      gpu_model = "NVIDIA H100 80GB HBM3"

      gpu_constraint {
        attribute = "memory"
        operator  = ">="
        value     = "40 GiB"
      }

      gpu_affinity {
        attribute = "persistence_mode"
        value     = "Enabled"
        weight    = 25
      }
    }

    trainer_resources {
      cpu    = 500
      memory = "512 MiB"
    }
  }

  run {
    storage_path = "file:///mnt/shared/results"

    checkpoint {
      num_to_keep     = 3
      score_attribute = "test_accuracy"
      score_order     = "max"
    }

    failure {
      max_failures = -1
    }
  }

  rendezvous {
    backend = "consul"
    timeout = "10m"
  }
}
