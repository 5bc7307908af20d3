# Eight GPU workers, two GPUs each with at least 40 GiB, spread across nodes.
# The storage path must be a directory every client mounts (NFS, for example).

variable "workers" {
  type        = number
  default     = 8
  description = "Number of workers (one Nomad allocation each)."
}

variable "lr" {
  type    = number
  default = 0.001
}

train "resnet-gpu" {
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
    builtin = "quickstart"
  }

  config = {
    learning_rate = var.lr
    epochs        = 90
    model         = "resnet50"
    schedule      = { warmup = 5, decay = [30, 60, 80] }
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
      score_attribute = "accuracy"
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
