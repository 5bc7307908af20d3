train "x" {
  entrypoint { builtin = "quickstart" }
  scaling {
    num_workers = "four"
    use_gpu     = "yes please"
  }
}
