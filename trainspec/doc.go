// Package trainspec is the train.hcl language: a run described in HCL, decoded
// with diagnostics that carry source ranges, compiled into a Nomad batch job
// (*api.Job from github.com/hashicorp/nomad/api), and rendered as a Nomad
// HCL2 jobspec or as the JSON that `nomad job run -json` accepts.
//
// A spec holds one train block and any number of variable blocks:
//
//	variable "workers" {
//	  type    = number
//	  default = 4
//	}
//
//	train "quickstart" {
//	  entrypoint { builtin = "quickstart" }
//
//	  # The train loop config reaches every worker as JSON.
//	  config = { epochs = 20, learning_rate = 0.05 }
//
//	  scaling {
//	    num_workers = var.workers
//	    resources_per_worker {
//	      cpu    = 500
//	      memory = "1 GiB"
//	    }
//	  }
//
//	  run {
//	    storage_path = "/mnt/shared/results"
//	    checkpoint {
//	      num_to_keep     = 2
//	      score_attribute = "loss"
//	      score_order     = "min"
//	    }
//	    failure { max_failures = 2 }
//	  }
//	}
//
// The train block also takes datacenters, namespace, region, node_pool,
// priority, meta, env and a rendezvous block (backend = "consul" or
// "embedded", address, timeout, rejoin_timeout); entrypoint may instead name a command with
// args and an artifact; scaling takes use_gpu, placement_strategy ("PACK",
// "SPREAD", "STRICT_SPREAD") and trainer_resources; resources_per_worker
// takes gpu, gpu_model, and gpu_constraint / gpu_affinity blocks (attribute
// names such as "memory" become ${device.attr.memory}). run may hold a
// storage block instead of storage_path: path (a directory or
// s3://bucket/prefix) and an object store's non-secret options (endpoint,
// region, path_style, credentials = "variable" or "node",
// credentials_variable); keys that look like credentials are refused.
// volume "name" blocks (type "host" or "csi", source, destination,
// read_only, and a CSI volume's access_mode, attachment_mode, per_alloc)
// become the worker group's volumes and the worker task's mounts. Strings are HCL
// templates: write $${...} for a literal ${...} that Nomad should see.
//
// Variables are set, in increasing precedence, by their default, by
// NOMAD_VAR_<name> environment variables, by -var-file files and by -var
// flags (ParseOptions), as in Nomad. Only the functions listed by
// FunctionNames may be called.
//
// Parse and ParseFile return every problem at once as hcl.Diagnostics;
// print them with hcl.NewDiagnosticTextWriter and the files of the parser
// given in ParseOptions.Parser. Compile, RenderHCL and RenderJSON are
// deterministic, so their output can be checked into version control.
package trainspec
