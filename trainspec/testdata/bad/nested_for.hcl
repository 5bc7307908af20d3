train "x" {
  entrypoint { builtin = "quickstart" }
  config = {
    grid = [for lr in [0.1, 0.01] : [for bs in [32, 64] : { lr = lr, bs = bs }]]
  }
}
