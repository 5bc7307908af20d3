# Eight PyTorch workers (train.py: DDP over NCCL, each on its own GPUs as cuda:0..)
# spread across nodes; Nomad's NVIDIA device plugin must run on the clients (README,
# GPUs). train.py must reach the task dir and storage_path be mounted on every client.

variable "workers" {
  type        = number
  default     = 8
  description = "Number of workers (one Nomad allocation each)."
}

variable "lr" {
  type    = number
  default = 0.002
}

train "ddp-gpu" {
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
    command = "python3"
    args    = ["train.py"]
  }

  config = {
    lr         = var.lr
    epochs     = 10
    batch_size = 512
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
