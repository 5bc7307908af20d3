job "torch-ddp" {
  type     = "batch"
  priority = 50

  meta {
    nomad_train_run          = "torch-ddp"
    nomad_train_spec_sha256  = "87095b0541736a684e5af16d7e73a37eb0a84bcaba7c4052d3ef591bf8b63b0b"
    nomad_train_storage_path = "./results"
  }

  group "worker" {
    count          = 2
    shutdown_delay = "2s"

    network {
      port "train" {
      }
      port "metrics" {
      }
      port "torch" {
      }
    }

    service {
      name     = "torch-ddp-worker"
      port     = "train"
      provider = "consul"
      tags     = ["nomad-train", "run=torch-ddp"]
      check {
        name     = "collective port"
        type     = "tcp"
        port     = "train"
        interval = "10s"
        timeout  = "2s"
      }
    }

    service {
      name     = "torch-ddp-metrics"
      port     = "metrics"
      provider = "consul"
      tags     = ["prometheus", "metrics_path=/metrics", "nomad-train", "run=torch-ddp"]
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
        args         = ["train.py"]
        command      = "python3"
        port         = "train"
        run_name     = "torch-ddp"
        storage_path = "./results"
        train_config = "{\"epochs\":6,\"lr\":0.05}"
        world_size   = 2
        checkpoint {
          num_to_keep = 2
          score_order = "max"
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
        NOMAD_TRAIN_TORCH_PORT   = "$${NOMAD_PORT_torch}"
      }

      template {
        data        = "{{ with nomadVar \"nomad/jobs/torch-ddp\" }}{{ .secret }}{{ end }}"
        destination = "secrets/nomad-train.secret"
        change_mode = "restart"
        perms       = "0400"
      }

      resources {
        cores  = 1
        memory = 1024
      }
    }
  }
}
