train "x" {
  entrypoint { builtin = "quickstart" }
  rendezvous {
    backend = "etcd"
    timeout = "5 minutes"
  }
}
