train "x" {
  entrypoint { builtin = "quickstart" }
  env = {
    SHARD  = "${NOMAD_ALLOC_INDEX}"
    HOST   = "${node.unique.name}"
    ESCAPE = "$${NOMAD_ALLOC_ID}"
  }
}
