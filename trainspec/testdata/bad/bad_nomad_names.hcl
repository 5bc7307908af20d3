train "x" {
  entrypoint { builtin = "quickstart" }
  namespace = "ml team/../x"
  node_pool = "gpu pool!"
}
