# Provision a nomad-train run with Terraform's Nomad provider: the run's
# secret in its Nomad Variable, then the compiled job.
#
#   nomad-train compile -json -o job.json ../quickstart/train.hcl
#   export NOMAD_ADDR=http://nomad.example:4646   # and NOMAD_TOKEN with ACLs
#   terraform init && terraform apply
#
# Workers authenticate their rendezvous and collectives with the secret the
# job's template reads from nomad/jobs/<job ID> (item "secret"); Nomad holds
# the tasks until that Variable exists. The secret is a random_password
# unless var.run_secret gives one. Terraform keeps it in its state, as it
# keeps every secret it creates: use a state backend that encrypts.

terraform {
  required_version = ">= 1.5"

  required_providers {
    nomad = {
      source  = "hashicorp/nomad"
      version = ">= 2.1"
    }
    random = {
      source  = "hashicorp/random"
      version = ">= 3.5"
    }
  }
}

# The address and token come from NOMAD_ADDR and NOMAD_TOKEN.
provider "nomad" {}

variable "job_file" {
  type        = string
  default     = "job.json"
  description = "The run's Nomad job as JSON, from nomad-train compile -json."
}

variable "run_secret" {
  type        = string
  default     = null
  sensitive   = true
  description = "The run's shared secret; a random one when unset."
}

locals {
  job       = jsondecode(file(var.job_file)).Job
  namespace = coalesce(try(local.job.Namespace, null), "default")
  secret    = var.run_secret != null ? var.run_secret : random_password.run_secret.result
}

resource "random_password" "run_secret" {
  length  = 64
  special = false
}

resource "nomad_variable" "run_secret" {
  path      = "nomad/jobs/${local.job.ID}"
  namespace = local.namespace
  items = {
    secret = local.secret
  }
}

resource "nomad_job" "run" {
  jobspec = file(var.job_file)
  json    = true

  # A worker without its secret waits; with it first, none has to.
  depends_on = [nomad_variable.run_secret]
}

output "job_id" {
  value       = nomad_job.run.id
  description = "The Nomad job that runs the workers: nomad-train status <job_id>."
}

output "namespace" {
  value = local.namespace
}
