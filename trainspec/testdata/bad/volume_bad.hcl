train "x" {
  entrypoint { builtin = "quickstart" }
  scaling { num_workers = 4 }
  volume "nfs" {
    type        = "nfs"
    source      = "share"
    destination = "mnt/shared"
  }
  volume "host" {
    type        = "host"
    source      = "share"
    destination = "/mnt/a"
    access_mode = "single-node-writer"
  }
  volume "csi" {
    type        = "csi"
    source      = "vol"
    destination = "/mnt/a"
  }
  volume "ro" {
    type            = "csi"
    source          = "vol"
    destination     = "/mnt/ro"
    access_mode     = "multi-node-reader-only"
    attachment_mode = "file-system"
  }
  volume "one" {
    type            = "csi"
    source          = "vol"
    destination     = "/mnt/one"
    access_mode     = "single-node-writer"
    attachment_mode = "file-system"
  }
  volume "one" {
    type        = "host"
    source      = "x"
    destination = "/mnt/two"
  }
}
