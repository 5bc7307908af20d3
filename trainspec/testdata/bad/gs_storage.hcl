train "x" {
  entrypoint { builtin = "quickstart" }
  run {
    storage_path = "gs://bucket/results"
  }
}
