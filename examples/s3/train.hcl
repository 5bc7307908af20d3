# The quickstart kept on S3-compatible object storage: any machine that
# reaches the bucket can resume the run, so no directory needs to be shared.
# The spec holds no credentials. Locally the workers use the AWS chain
# (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile); on Nomad they
# read the keys from the Variable nomad/jobs/quickstart-s3/worker:
#
#   nomad var put nomad/jobs/quickstart-s3/worker \
#     aws_access_key_id="$AWS_ACCESS_KEY_ID" aws_secret_access_key="$AWS_SECRET_ACCESS_KEY"
train "quickstart-s3" {
  entrypoint {
    builtin = "quickstart"
  }

  config = {
    epochs     = 20
    batch_size = 64
    lr         = 0.05
  }

  scaling {
    num_workers = 2

    resources_per_worker {
      cpu    = 500
      memory = 256
    }
  }

  run {
    storage {
      path       = "s3://nomad-train/runs"
      endpoint   = "http://127.0.0.1:7070" # a MinIO, Ceph RGW or versitygw server; leave out for AWS S3
      region     = "us-east-1"
      path_style = true
    }

    checkpoint {
      num_to_keep     = 2
      score_attribute = "loss"
      score_order     = "min"
    }

    failure {
      max_failures = 2
    }
  }
}
