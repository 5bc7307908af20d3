train "x" {
  entrypoint { builtin = "quickstart" }
  run {
    storage_path = "s3://bucket/results"
  }
}
