train "x" {
  entrypoint {
    command = file("train.sh")
  }
}
