train "x" {
  entrypoint { builtin = "quickstart" }
  run {
    storage {
      path        = "/mnt/results"
      endpoint    = "minio:9000"
      region      = "us-east-1"
      credentials = "vault"
    }
  }
}
