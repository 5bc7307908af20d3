# The quickstart on a cluster that shares a filesystem: an NFS export mounted
# at /mnt/shared on every client, which offers it as the host volume
# "train-results" (client config: host_volume "train-results" { path =
# "/mnt/shared" }). The workers are placed only on clients that have it. The
# train driver runs workers without filesystem isolation: it moves the
# storage_path under destination onto the client's path for the volume, so
# that path may differ from destination, and from one client to another.
train "quickstart-volume" {
  entrypoint {
    builtin = "quickstart"
  }

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

  volume "results" {
    type        = "host"
    source      = "train-results"
    destination = "/mnt/shared"
  }

  run {
    storage_path = "/mnt/shared/results"

    checkpoint {
      num_to_keep     = 2
      score_attribute = "loss"
      score_order     = "min"
    }
  }
}
