variable "workers" {
  default = 2
}

train "x" {
  entrypoint { builtin = "quickstart" }
  scaling {
    num_workers = var.worker
  }
}
