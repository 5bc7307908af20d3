train "x" {
  entrypoint { builtin = "quickstart" }
  env = {
    NOMAD_TRAIN_STORAGE_OUTAGE_GRACE = "soon"
    NOMAD_TRAIN_STALL_FACTOR         = "1"
    NOMAD_TRAIN_LEASE_TTL            = "15s"
    NOMAD_TRAIN_METRICS_ADDR         = "$${NOMAD_ADDR_metrics}"
  }
}
