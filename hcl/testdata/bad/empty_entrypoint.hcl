train "x" {
  entrypoint {
  }
}
