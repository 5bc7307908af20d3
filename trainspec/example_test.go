package trainspec_test

import (
	"fmt"
	"os"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/nomad-train/nomad-train/trainspec"
)

func ExampleParse() {
	src := []byte(`
variable "workers" {
  type    = number
  default = 2
}

train "demo" {
  entrypoint { builtin = "quickstart" }
  config = { epochs = 3 }
  scaling { num_workers = var.workers }
}
`)
	spec, diags := trainspec.Parse(src, "train.hcl", trainspec.ParseOptions{
		Vars: map[string]string{"workers": "4"},
	})
	if diags.HasErrors() {
		fmt.Println(diags)
		return
	}
	job, _ := trainspec.Compile(spec)
	task := job.TaskGroups[0].Tasks[0]
	fmt.Println(*job.ID, *job.Type, *job.TaskGroups[0].Count, task.Driver)
	fmt.Println(task.Config["train_config"], task.Config["world_size"])
	// Output:
	// demo batch 4 train
	// {"epochs":3} 4
}

func ExampleParse_diagnostics() {
	src := []byte(`train "demo" {
  entrypoint { builtin = "quickstart" }
  scaling { num_worker = 2 }
}
`)
	parser := hclparse.NewParser()
	_, diags := trainspec.Parse(src, "train.hcl", trainspec.ParseOptions{Parser: parser})
	w := hcl.NewDiagnosticTextWriter(os.Stdout, parser.Files(), 78, false)
	_ = w.WriteDiagnostics(diags)
	// Output:
	// Error: Unsupported argument
	//
	//   on train.hcl line 3, in train "demo":
	//    3:   scaling { num_worker = 2 }
	//
	// An argument named "num_worker" is not expected here. Did you mean
	// "num_workers"?
	//
}
