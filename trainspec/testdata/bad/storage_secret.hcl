train "x" {
  entrypoint { builtin = "quickstart" }
  env        = { AWS_SECRET_ACCESS_KEY = "wJalrXUtnFEMI" }
  run {
    storage {
      path       = "s3://bucket/runs"
      access_key = "AKIAEXAMPLE"
      secret_key = "wJalrXUtnFEMI"
      token      = "t"
      endpoint   = "https://AKIA:secret@minio.example:9000"
      color      = "blue"
    }
  }
}
