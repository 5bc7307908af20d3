# A user's own training binary (built with the trainer package), fetched by
# Nomad as an artifact, with its flags and config coming from variables.
# Set them with -var, -var-file or NOMAD_VAR_<name>, as with Nomad.

variable "version" {
  type        = string
  description = "Release of the training binary to fetch."
  default     = "1.4.0"
}

variable "epochs" {
  type    = number
  default = 10
}

variable "datasets" {
  type    = list(string)
  default = ["train-a", "train-b"]
}

train "my-model" {
  region = "europe"

  entrypoint {
    command = "local/my-trainer"
    args    = ["-epochs", tostring(var.epochs), "-data", join(",", var.datasets)]

    artifact {
      source      = format("https://releases.example.com/my-trainer/%s/my-trainer_linux_amd64.tar.gz", var.version)
      destination = "local/"
      options = {
        checksum = "sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
      }
    }
  }

  config = {
    epochs  = var.epochs
    tags    = [for d in var.datasets : upper(d)]
    hparams = jsonencode({ dropout = 0.1 })
  }

  scaling {
    num_workers        = 3
    placement_strategy = "STRICT_SPREAD"

    resources_per_worker {
      cpu    = 2000
      memory = 4096
    }
  }

  run {
    storage_path = "/srv/nomad-train/results"

    failure {
      max_failures = 3
    }
  }

  rendezvous {
    timeout = "2m"
  }
}
