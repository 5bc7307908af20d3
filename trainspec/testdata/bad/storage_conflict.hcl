train "x" {
  entrypoint { builtin = "quickstart" }
  run {
    storage_path = "/mnt/results"
    storage {
      path = "s3://bucket/runs"
    }
  }
}
