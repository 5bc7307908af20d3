train "x" {
  entrypoint { builtin = "quickstart" }
  run {
    checkpoint {
      num_to_keep = -1
      score_order = "best"
    }
    failure {
      max_failures = -2
    }
  }
}
