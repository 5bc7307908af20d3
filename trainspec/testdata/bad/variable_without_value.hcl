variable "workers" {
  type = number
}

train "x" {
  entrypoint { builtin = "quickstart" }
  scaling {
    num_workers = var.workers
  }
}
