variable "workers" {
  default = 2
}
