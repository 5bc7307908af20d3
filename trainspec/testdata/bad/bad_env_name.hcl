train "x" {
  entrypoint { builtin = "quickstart" }
  env = {
    "C=D"   = "z"
    "A B"   = "x"
    ""      = "y"
    "TAB\t" = "w"
    GOOD    = "v"
  }
}
