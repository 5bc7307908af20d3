# The quickstart on a cluster that shares a filesystem: an NFS export that
# every client offers as the host volume "train-results" (client config:
# host_volume "train-results" { path = "/srv/nfs/train" }), mounted into
# every worker at /mnt/shared. A CSI volume works the same way with
# type = "csi" and a multi-node access mode.
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
