job "ddp-gpu" {
  type        = "batch"
  namespace   = "ml"
  datacenters = ["dc1", "dc2"]
  node_pool   = "gpu"
  priority    = 70

  meta {
    nomad_train_run          = "ddp-gpu"
    nomad_train_spec_sha256  = "a2da13c3bb9d3309f3efb6d2da34392056449f6434c450942147db5be3dab99e"
    nomad_train_storage_path = "/mnt/shared/results"
    team                     = "vision"
  }

  group "worker" {
    count          = 8
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
      name     = "ddp-gpu-worker"
      port     = "train"
      provider = "consul"
      tags     = ["nomad-train", "run=ddp-gpu"]
      check {
        name     = "collective port"
        type     = "tcp"
        port     = "train"
        interval = "10s"
        timeout  = "2s"
      }
    }

    service {
      name     = "ddp-gpu-metrics"
      port     = "metrics"
      provider = "consul"
      tags     = ["prometheus", "metrics_path=/metrics", "nomad-train", "run=ddp-gpu"]
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
      attempts = 10
      interval = "10m"
      delay    = "1s"
      mode     = "delay"
    }

    reschedule {
      attempts       = 0
      delay          = "5s"
      delay_function = "exponential"
      max_delay      = "1m"
      unlimited      = true
    }

    spread {
      attribute = "$${node.unique.id}"
      weight    = 100
    }

    task "worker" {
      driver       = "train"
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      config {
        args         = ["train.py"]
        command      = "python3"
        port         = "train"
        run_name     = "ddp-gpu"
        storage_path = "/mnt/shared/results"
        train_config = "{\"batch_size\":512,\"epochs\":10,\"lr\":0.002}"
        world_size   = 8
        checkpoint {
          num_to_keep     = 3
          score_attribute = "test_accuracy"
          score_order     = "max"
        }
        failure {
          max_failures = -1
        }
        rendezvous {
          backend = "consul"
          timeout = "10m"
        }
      }

      env {
        NCCL_DEBUG               = "WARN"
        NOMAD_TRAIN_METRICS_ADDR = "$${NOMAD_ADDR_metrics}"
        NOMAD_TRAIN_STOP_GRACE   = "22s"
        NOMAD_TRAIN_TORCH_PORT   = "$${NOMAD_PORT_torch}"
      }

      template {
        data        = "{{ with nomadVar \"nomad/jobs/ddp-gpu\" }}{{ .secret }}{{ end }}"
        destination = "secrets/nomad-train.secret"
        change_mode = "restart"
        perms       = "0400"
      }

      resources {
        cores  = 8
        memory = 65536
        device "nvidia/gpu" {
          count = 2
          constraint {
            attribute = "$${device.model}"
            operator  = "="
            value     = "NVIDIA H100 80GB HBM3"
          }
          constraint {
            attribute = "$${device.attr.memory}"
            operator  = ">="
            value     = "40 GiB"
          }
          affinity {
            attribute = "$${device.attr.persistence_mode}"
            operator  = "="
            value     = "Enabled"
            weight    = 25
          }
        }
      }
    }
  }
}
