job "quickstart-s3" {
  type     = "batch"
  priority = 50

  meta {
    nomad_train_run          = "quickstart-s3"
    nomad_train_spec_sha256  = "95df1a1f1ac244e8e2823d9da5f1e8ba2547d23bee55b0405a051aa6bf0cd940"
    nomad_train_storage_path = "s3://nomad-train/runs"
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
      name     = "quickstart-s3-worker"
      port     = "train"
      provider = "consul"
      tags     = ["nomad-train", "run=quickstart-s3"]
      check {
        name     = "collective port"
        type     = "tcp"
        port     = "train"
        interval = "10s"
        timeout  = "2s"
      }
    }

    service {
      name     = "quickstart-s3-metrics"
      port     = "metrics"
      provider = "consul"
      tags     = ["prometheus", "metrics_path=/metrics", "nomad-train", "run=quickstart-s3"]
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
        run_name     = "quickstart-s3"
        storage_path = "s3://nomad-train/runs"
        train_config = "{\"batch_size\":64,\"epochs\":20,\"lr\":0.05}"
        world_size   = 2
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
        storage {
          endpoint   = "http://127.0.0.1:7070"
          path_style = true
          region     = "us-east-1"
        }
      }

      env {
        NOMAD_TRAIN_METRICS_ADDR = "$${NOMAD_ADDR_metrics}"
        NOMAD_TRAIN_STOP_GRACE   = "22s"
      }

      template {
        data        = "{{ with nomadVar \"nomad/jobs/quickstart-s3\" }}{{ .secret }}{{ end }}"
        destination = "secrets/nomad-train.secret"
        change_mode = "restart"
        perms       = "0400"
      }

      template {
        data        = "{{ with nomadVar \"nomad/jobs/quickstart-s3/worker\" }}AWS_ACCESS_KEY_ID={{ .aws_access_key_id }}\nAWS_SECRET_ACCESS_KEY={{ .aws_secret_access_key }}\n{{ end }}"
        destination = "secrets/s3.env"
        change_mode = "restart"
        perms       = "0400"
        env         = true
      }

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
