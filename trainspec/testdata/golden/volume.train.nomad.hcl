job "quickstart-volume" {
  type     = "batch"
  priority = 50

  meta {
    nomad_train_run          = "quickstart-volume"
    nomad_train_spec_sha256  = "c8ddd35fdf977cc8b12da22c461ba043744571317d80d57c2bf419f148e16f19"
    nomad_train_storage_path = "/mnt/shared/results"
  }

  group "worker" {
    count          = 4
    shutdown_delay = "2s"

    volume "results" {
      type      = "host"
      source    = "train-results"
      read_only = false
    }

    network {
      port "train" {
      }
      port "metrics" {
      }
    }

    service {
      name     = "quickstart-volume-worker"
      port     = "train"
      provider = "consul"
      tags     = ["nomad-train", "run=quickstart-volume"]
      check {
        name     = "collective port"
        type     = "tcp"
        port     = "train"
        interval = "10s"
        timeout  = "2s"
      }
    }

    service {
      name     = "quickstart-volume-metrics"
      port     = "metrics"
      provider = "consul"
      tags     = ["prometheus", "metrics_path=/metrics", "nomad-train", "run=quickstart-volume"]
      check {
        name     = "metrics"
        type     = "http"
        path     = "/metrics"
        port     = "metrics"
        interval = "10s"
        timeout  = "2s"
      }
    }

    restart {
      attempts = 0
      interval = "24h"
      delay    = "1s"
      mode     = "fail"
    }

    reschedule {
      attempts       = 0
      interval       = "24h"
      delay          = "5s"
      delay_function = "constant"
      unlimited      = false
    }

    task "worker" {
      driver       = "train"
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      config {
        builtin      = "quickstart"
        port         = "train"
        run_name     = "quickstart-volume"
        storage_path = "/mnt/shared/results"
        train_config = "{\"batch_size\":64,\"epochs\":20,\"lr\":0.05}"
        world_size   = 4
        checkpoint {
          num_to_keep     = 2
          score_attribute = "loss"
          score_order     = "min"
        }
        failure {
          max_failures = 0
        }
        rendezvous {
          backend = "consul"
          timeout = "5m"
        }
      }

      env {
        NOMAD_TRAIN_METRICS_ADDR = "$${NOMAD_ADDR_metrics}"
        NOMAD_TRAIN_STOP_GRACE   = "22s"
      }

      template {
        data        = "{{ with nomadVar \"nomad/jobs/quickstart-volume\" }}{{ .secret }}{{ end }}"
        destination = "secrets/nomad-train.secret"
        change_mode = "restart"
        perms       = "0400"
      }

      volume_mount {
        volume      = "results"
        destination = "/mnt/shared"
        read_only   = false
      }

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
