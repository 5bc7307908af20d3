train "x" {
  entrypoint { builtin = "quickstart" }
  scaling {
    placement_strategy = "spread"
  }
}
