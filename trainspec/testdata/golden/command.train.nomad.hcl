job "my-model" {
  type     = "batch"
  region   = "europe"
  priority = 50

  meta {
    nomad_train_run          = "my-model"
    nomad_train_spec_sha256  = "eb35f557973f703a5b60ae222242551545e0921b05aac748d9edce3cbe89f2b3"
    nomad_train_storage_path = "/srv/nomad-train/results"
  }

  group "worker" {
    count          = 3
    shutdown_delay = "2s"

    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    network {
      port "train" {
      }
      port "metrics" {
      }
      port "torch" {
      }
    }

    service {
      name     = "my-model-worker"
      port     = "train"
      provider = "consul"
      tags     = ["nomad-train", "run=my-model"]
      check {
        name     = "collective port"
        type     = "tcp"
        port     = "train"
        interval = "10s"
        timeout  = "2s"
      }
    }

    service {
      name     = "my-model-metrics"
      port     = "metrics"
      provider = "consul"
      tags     = ["prometheus", "metrics_path=/metrics", "nomad-train", "run=my-model"]
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
      attempts = 3
      interval = "24h"
      delay    = "1s"
      mode     = "fail"
    }

    reschedule {
      attempts       = 3
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
        args         = ["-epochs", "10", "-data", "train-a,train-b"]
        command      = "local/my-trainer"
        port         = "train"
        run_name     = "my-model"
        storage_path = "/srv/nomad-train/results"
        train_config = "{\"epochs\":10,\"hparams\":\"{\\\"dropout\\\":0.1}\",\"tags\":[\"TRAIN-A\",\"TRAIN-B\"]}"
        world_size   = 3
        checkpoint {
          num_to_keep = 0
          score_order = "max"
        }
        failure {
          max_failures = 3
        }
        rendezvous {
          backend = "consul"
          timeout = "2m"
        }
      }

      env {
        NOMAD_TRAIN_METRICS_ADDR = "$${NOMAD_ADDR_metrics}"
        NOMAD_TRAIN_STOP_GRACE   = "22s"
        NOMAD_TRAIN_TORCH_PORT   = "$${NOMAD_PORT_torch}"
      }

      artifact {
        source      = "https://releases.example.com/my-trainer/1.4.0/my-trainer_linux_amd64.tar.gz"
        destination = "local/"

        options {
          checksum = "sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        }
      }

      template {
        data        = "{{ with nomadVar \"nomad/jobs/my-model\" }}{{ .secret }}{{ end }}"
        destination = "secrets/nomad-train.secret"
        change_mode = "restart"
        perms       = "0400"
      }

      resources {
        cpu    = 2000
        memory = 4096
      }
    }
  }
}
