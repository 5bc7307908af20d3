job "mnist" {
  type     = "batch"
  priority = 50

  meta {
    nomad_train_run          = "mnist"
    nomad_train_spec_sha256  = "1822b2c2223a42ac512375cf3a63f71efbd6c4223d67b9719fdc9c0bd14ae1bd"
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
      name     = "mnist-worker"
      port     = "train"
      provider = "consul"
      tags     = ["nomad-train", "run=mnist"]
      check {
        name     = "collective port"
        type     = "tcp"
        port     = "train"
        interval = "10s"
        timeout  = "2s"
      }
    }

    service {
      name     = "mnist-metrics"
      port     = "metrics"
      provider = "consul"
      tags     = ["prometheus", "metrics_path=/metrics", "nomad-train", "run=mnist"]
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
        builtin      = "mnist-mlp"
        port         = "train"
        run_name     = "mnist"
        storage_path = "./results"
        train_config = "{\"batch_size\":64,\"epochs\":3,\"hidden\":128,\"lr\":0.001}"
        world_size   = 4
        checkpoint {
          num_to_keep     = 2
          score_attribute = "test_accuracy"
          score_order     = "max"
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
        NOMAD_TRAIN_BLAS         = "gonum"
        NOMAD_TRAIN_METRICS_ADDR = "$${NOMAD_ADDR_metrics}"
        NOMAD_TRAIN_STOP_GRACE   = "22s"
      }

      template {
        data        = "{{ with nomadVar \"nomad/jobs/mnist\" }}{{ .secret }}{{ end }}"
        destination = "secrets/nomad-train.secret"
        change_mode = "restart"
        perms       = "0400"
      }

      resources {
        cpu    = 1000
        memory = 512
      }
    }
  }
}
