train "x" {
  scaling {
    num_workers = 2
  }
}
