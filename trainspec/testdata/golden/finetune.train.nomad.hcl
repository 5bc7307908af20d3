job "quickstart-finetune" {
  type     = "batch"
  priority = 50

  meta {
    nomad_train_run          = "quickstart-finetune"
    nomad_train_spec_sha256  = "6b7e3e6b5b3a87c1324ae1c662a3f33053c3c4a2f8a8f153c91f22ebdc6ca889"
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
      name     = "quickstart-finetune-worker"
      port     = "train"
      provider = "consul"
      tags     = ["nomad-train", "run=quickstart-finetune"]
      check {
        name     = "collective port"
        type     = "tcp"
        port     = "train"
        interval = "10s"
        timeout  = "2s"
      }
    }

    service {
      name     = "quickstart-finetune-metrics"
      port     = "metrics"
      provider = "consul"
      tags     = ["prometheus", "metrics_path=/metrics", "nomad-train", "run=quickstart-finetune"]
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
        run_name     = "quickstart-finetune"
        storage_path = "./results"
        train_config = "{\"batch_size\":64,\"epochs\":30,\"lr\":0.01}"
        world_size   = 4
        checkpoint {
          num_to_keep     = 2
          resume_from     = "./results/quickstart/checkpoint_000019"
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
        data        = "{{ with nomadVar \"nomad/jobs/quickstart-finetune\" }}{{ .secret }}{{ end }}"
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
