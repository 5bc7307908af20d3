job "quickstart" {
  type     = "batch"
  priority = 50

  meta {
    nomad_train_run          = "quickstart"
    nomad_train_spec_sha256  = "e5623399ffcc1dc1c9ecc94491abb852367e4dd7c5851a1cd4bed97117f1968a"
    nomad_train_storage_path = "./results"
  }

  group "worker" {
    count          = 4
    shutdown_delay = "2s"

    network {
      port "train" {
      }
      port "metrics" {
      }
    }

    service {
      name     = "quickstart-worker"
      port     = "train"
      provider = "consul"
      tags     = ["nomad-train", "run=quickstart"]
      check {
        name     = "collective port"
        type     = "tcp"
        port     = "train"
        interval = "10s"
        timeout  = "2s"
      }
    }

    service {
      name     = "quickstart-metrics"
      port     = "metrics"
      provider = "consul"
      tags     = ["prometheus", "metrics_path=/metrics", "nomad-train", "run=quickstart"]
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
      attempts = 2
      interval = "24h"
      delay    = "1s"
      mode     = "fail"
    }

    reschedule {
      attempts       = 2
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
        run_name     = "quickstart"
        storage_path = "./results"
        train_config = "{\"batch_size\":64,\"epochs\":20,\"lr\":0.05}"
        world_size   = 4
        checkpoint {
          num_to_keep     = 2
          score_attribute = "loss"
          score_order     = "min"
        }
        failure {
          max_failures = 2
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
        data        = "{{ with nomadVar \"nomad/jobs/quickstart\" }}{{ .secret }}{{ end }}"
        destination = "secrets/nomad-train.secret"
        change_mode = "restart"
        perms       = "0400"
      }

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
