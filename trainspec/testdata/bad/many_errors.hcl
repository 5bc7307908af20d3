train "x" {
  priority = 500
  entrypoint {
    builtin = "quickstart"
    args    = ["-v"]
  }
  scaling {
    num_workers = 1.5
  }
  run {
    storage_path = "file://fileserver/results"
  }
}
