train "x" {
  entrypoint { builtin = "quickstart" }
  meta = {
    nomad_train_run = "mine"
  }
  env = {
    NOMAD_TRAIN_RUN = "mine"
    RANK            = "0"
  }
}
