train "x" {
  entrypoint { builtin = "quickstart" }
  scalling {
    num_workers = 4
  }
}
