job "quickstart-tune" {
  type     = "batch"
  priority = 50

  meta {
    nomad_train_run          = "quickstart-tune"
    nomad_train_spec_sha256  = "d17672dbad138c91a2ec3affe327bae9564bc7b96076c4b5bc8d14f981019fca"
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
    }

    service {
      name     = "quickstart-tune-worker"
      port     = "train"
      provider = "consul"
      tags     = ["nomad-train", "run=quickstart-tune"]
      check {
        name     = "collective port"
        type     = "tcp"
        port     = "train"
        interval = "10s"
        timeout  = "2s"
      }
    }

    service {
      name     = "quickstart-tune-metrics"
      port     = "metrics"
      provider = "consul"
      tags     = ["prometheus", "metrics_path=/metrics", "nomad-train", "run=quickstart-tune"]
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
        run_name     = "quickstart-tune"
        storage_path = "./results"
        train_config = "{\"batch_size\":{\"choice\":[16,32,64]},\"epochs\":9,\"lr\":{\"loguniform\":[0.001,0.1]}}"
        world_size   = 2
        checkpoint {
          num_to_keep = 1
          score_order = "max"
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
        data        = "{{ with nomadVar \"nomad/jobs/quickstart-tune\" }}{{ .secret }}{{ end }}"
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
