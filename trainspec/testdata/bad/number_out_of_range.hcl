train "x" {
  entrypoint { builtin = "quickstart" }
  config = {
    huge = 1e99999999
    tiny = 1e-99999999
    ok   = 1.5e300
  }
}
