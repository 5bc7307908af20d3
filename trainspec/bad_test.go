package trainspec

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// TestBadSpecs decodes every file in testdata/bad and asserts the exact
// diagnostics: range (file:line:col-line:col), severity, summary and detail,
// in order. Every bad file must be listed here, so a new one cannot go
// unchecked.
func TestBadSpecs(t *testing.T) {
	cases := []struct {
		file string
		want []string
	}{
		{"artifact_for_builtin.hcl", []string{
			"artifact_for_builtin.hcl:4:5-4:13: error: Artifact for a builtin; An artifact fetches a command's files; a builtin ships inside the task driver.",
			"artifact_for_builtin.hcl:4:14-4:14: error: Missing required argument; The argument \"source\" is required, but no definition was found.",
		}},
		{"bad_checkpoint.hcl", []string{
			"bad_checkpoint.hcl:5:21-5:23: error: Invalid value; num_to_keep must be at least 0; got -1.",
			"bad_checkpoint.hcl:6:21-6:27: error: Invalid value; score_order must be one of \"max\" or \"min\"; got \"best\".",
			"bad_checkpoint.hcl:9:22-9:24: error: Invalid value; max_failures must be at least -1; got -2.",
		}},
		{"bad_enum.hcl", []string{
			"bad_enum.hcl:4:26-4:34: error: Invalid value; placement_strategy must be one of \"PACK\", \"SPREAD\" or \"STRICT_SPREAD\"; got \"spread\". Did you mean \"SPREAD\"?",
		}},
		{"bad_memory.hcl", []string{
			"bad_memory.hcl:6:16-6:25: error: Invalid memory size; \"16 gigs\" is not a memory size; write a number of MiB or a string such as \"512 MiB\" or \"16 GiB\".",
			"bad_memory.hcl:10:21-10:22: error: Invalid value; weight must be between -100 and 100 and not 0.",
			"bad_memory.hcl:4:5-4:19: warning: GPUs reserved for a builtin that computes on the CPU; The builtin \"quickstart\" computes on the CPU, so the GPUs use_gpu reserves for each worker would sit idle. Use a command entrypoint that uses them (a PyTorch script: see examples/gpu), or remove use_gpu.",
		}},
		{"bad_name.hcl", []string{
			"bad_name.hcl:1:7-1:17: error: Invalid run name; The run name \"my.model\" must be 1 to 56 letters, digits, dashes or underscores, starting and ending with a letter or digit: it names the Nomad job, the results directory and the Consul service.",
		}},
		{"bad_env_name.hcl", []string{
			"bad_env_name.hcl:6:5-6:7: error: Invalid environment variable name; \"\" cannot be a variable's name: a name is not empty and holds no \"=\", NUL or white space (a worker would get another variable, or none).",
			"bad_env_name.hcl:5:5-5:10: error: Invalid environment variable name; \"A B\" cannot be a variable's name: a name is not empty and holds no \"=\", NUL or white space (a worker would get another variable, or none).",
			"bad_env_name.hcl:4:5-4:10: error: Invalid environment variable name; \"C=D\" cannot be a variable's name: a name is not empty and holds no \"=\", NUL or white space (a worker would get another variable, or none).",
			"bad_env_name.hcl:7:5-7:12: error: Invalid environment variable name; \"TAB\\t\" cannot be a variable's name: a name is not empty and holds no \"=\", NUL or white space (a worker would get another variable, or none).",
		}},
		{"bad_nomad_names.hcl", []string{
			"bad_nomad_names.hcl:3:15-3:29: error: Invalid value; namespace \"ml team/../x\" is not a name Nomad takes: 1 to 128 letters, digits and dashes.",
			"bad_nomad_names.hcl:4:15-4:26: error: Invalid value; node_pool \"gpu pool!\" is not a name Nomad takes: 1 to 128 letters, digits, dashes and underscores.",
		}},
		{"bad_runtime_setting.hcl", []string{
			"bad_runtime_setting.hcl:5:5-5:29: error: Invalid runtime setting; NOMAD_TRAIN_STALL_FACTOR=\"1\" is not a number above 1: every worker would refuse to start.",
			"bad_runtime_setting.hcl:4:5-4:37: error: Invalid runtime setting; NOMAD_TRAIN_STORAGE_OUTAGE_GRACE=\"soon\" is not a positive duration: every worker would refuse to start.",
		}},
		{"bad_timeout.hcl", []string{
			"bad_timeout.hcl:4:15-4:21: error: Invalid value; backend must be one of \"embedded\" or \"consul\"; got \"etcd\".",
			"bad_timeout.hcl:5:15-5:26: error: Invalid duration; timeout must be a duration such as \"30s\" or \"5m\"; \"5 minutes\" is not one.",
		}},
		{"builtin_and_command.hcl", []string{
			"builtin_and_command.hcl:4:5-4:12: error: Conflicting entrypoint; Set either builtin or command, not both.",
		}},
		{"config_not_object.hcl", []string{
			"config_not_object.hcl:3:12-3:21: error: Incorrect attribute value type; config must be an object, such as { lr = 0.01, epochs = 10 }; got tuple.",
		}},
		{"cpu_and_cores.hcl", []string{
			"cpu_and_cores.hcl:6:7-6:12: error: Conflicting CPU settings; Set either cpu (MHz) or cores (dedicated cores), not both: Nomad rejects a task with both.",
		}},
		{"duplicate_block.hcl", []string{
			"duplicate_block.hcl:6:3-6:10: error: Duplicate scaling block; Only one scaling block is allowed here; the first was defined at duplicate_block.hcl:3,3-10.",
		}},
		{"empty_entrypoint.hcl", []string{
			"empty_entrypoint.hcl:2:3-2:13: error: Missing entrypoint; The entrypoint block needs builtin (one of \"external\", \"mnist-cnn\", \"mnist-logreg\", \"mnist-mlp\" or \"quickstart\") or command.",
		}},
		{"gpu_without_use_gpu.hcl", []string{
			"gpu_without_use_gpu.hcl:6:7-6:10: error: GPU requested without use_gpu; resources_per_worker sets gpu, but scaling.use_gpu is not true. Set use_gpu = true in the scaling block.",
			"gpu_without_use_gpu.hcl:7:7-7:21: error: GPU requested without use_gpu; resources_per_worker sets gpu_constraint, but scaling.use_gpu is not true. Set use_gpu = true in the scaling block.",
		}},
		{"many_errors.hcl", []string{
			"many_errors.hcl:2:14-2:17: error: Invalid value; priority must be between 1 and 100; got 500.",
			"many_errors.hcl:5:5-5:9: error: Arguments for a builtin; args are passed to a command; a builtin takes its settings from config.",
			"many_errors.hcl:8:19-8:22: error: Invalid value; num_workers must be a whole number; got 1.5.",
			"many_errors.hcl:11:20-11:47: error: Unsupported storage path; file URL \"file://fileserver/results\" names host \"fileserver\"; only local files are supported.",
		}},
		{"missing_entrypoint.hcl", []string{
			"missing_entrypoint.hcl:1:1-1:10: error: Missing entrypoint block; A train block needs an entrypoint block: entrypoint { builtin = \"quickstart\" } or entrypoint { command = \"...\" }.",
		}},
		{"missing_train.hcl", []string{
			"missing_train.hcl:1:1-1:1: error: Missing train block; A spec needs one train \"<name>\" {} block.",
		}},
		{"nested_for.hcl", []string{
			"nested_for.hcl:4:37-4:80: error: Nested for expression; A for expression may not contain another: the result would grow with the product of the inputs.",
		}},
		{"number_out_of_range.hcl", []string{
			"number_out_of_range.hcl:4:12-4:22: error: Number out of range; Numbers must be within the range of a 64-bit float (about 1e-308 to 1e308).",
			"number_out_of_range.hcl:5:12-5:23: error: Number out of range; Numbers must be within the range of a 64-bit float (about 1e-308 to 1e308).",
		}},
		{"reserved_meta.hcl", []string{
			"reserved_meta.hcl:4:5-4:20: error: Reserved meta key; Meta keys starting with \"nomad_train_\" are set by nomad-train; rename \"nomad_train_run\".",
			"reserved_meta.hcl:7:5-7:20: error: Reserved environment variable; nomad-train sets \"NOMAD_TRAIN_RUN\" for every worker (the worker contract: NOMAD_TRAIN_ variables other than its tuning settings, and torchrun's); a job that sets it is refused. Rename or remove it.",
			"reserved_meta.hcl:8:5-8:9: error: Reserved environment variable; nomad-train sets \"RANK\" for every worker (the worker contract: NOMAD_TRAIN_ variables other than its tuning settings, and torchrun's); a job that sets it is refused. Rename or remove it.",
		}},
		{"runtime_interpolation.hcl", []string{
			"runtime_interpolation.hcl:4:17-4:34: error: Unknown variable; There is no variable named \"NOMAD_ALLOC_INDEX\". The spec is evaluated before Nomad sees it: to leave ${NOMAD_ALLOC_INDEX} for Nomad to interpolate at run time, escape it as $${NOMAD_ALLOC_INDEX}.",
			"runtime_interpolation.hcl:5:17-5:21: error: Unknown variable; There is no variable named \"node\". The spec is evaluated before Nomad sees it: to leave ${node.…} for Nomad to interpolate at run time, escape it as $${node.…}.",
		}},
		{"gs_storage.hcl", []string{
			"gs_storage.hcl:4:20-4:41: error: Unsupported storage path; storage scheme \"gs\" is not supported; use a local or mounted shared directory, an s3://bucket/prefix URL, or a file:// URL.",
		}},
		{"storage_secret.hcl", []string{
			"storage_secret.hcl:3:18-3:39: error: Credentials in the spec; AWS_SECRET_ACCESS_KEY is a credential. A spec holds no credentials (it is compiled into the Nomad job, which anyone who can read the job sees). Locally the workers use the AWS chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment, or a profile in ~/.aws. On Nomad they read them from the Nomad Variable nomad/jobs/<run>/worker (`nomad var put nomad/jobs/<run>/worker aws_access_key_id=... aws_secret_access_key=...`), or from an instance role with credentials = \"node\".",
			"storage_secret.hcl:7:7-7:17: error: Credentials in the spec; \"access_key\" looks like a credential, and the storage block takes none. A spec holds no credentials (it is compiled into the Nomad job, which anyone who can read the job sees). Locally the workers use the AWS chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment, or a profile in ~/.aws. On Nomad they read them from the Nomad Variable nomad/jobs/<run>/worker (`nomad var put nomad/jobs/<run>/worker aws_access_key_id=... aws_secret_access_key=...`), or from an instance role with credentials = \"node\".",
			"storage_secret.hcl:8:7-8:17: error: Credentials in the spec; \"secret_key\" looks like a credential, and the storage block takes none. A spec holds no credentials (it is compiled into the Nomad job, which anyone who can read the job sees). Locally the workers use the AWS chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment, or a profile in ~/.aws. On Nomad they read them from the Nomad Variable nomad/jobs/<run>/worker (`nomad var put nomad/jobs/<run>/worker aws_access_key_id=... aws_secret_access_key=...`), or from an instance role with credentials = \"node\".",
			"storage_secret.hcl:9:7-9:12: error: Credentials in the spec; \"token\" looks like a credential, and the storage block takes none. A spec holds no credentials (it is compiled into the Nomad job, which anyone who can read the job sees). Locally the workers use the AWS chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment, or a profile in ~/.aws. On Nomad they read them from the Nomad Variable nomad/jobs/<run>/worker (`nomad var put nomad/jobs/<run>/worker aws_access_key_id=... aws_secret_access_key=...`), or from an instance role with credentials = \"node\".",
			"storage_secret.hcl:11:7-11:12: error: Unsupported argument; An argument named \"color\" is not expected here.",
			"storage_secret.hcl:10:20-10:60: error: Invalid endpoint; endpoint \"https://AKIA:xxxxx@minio.example:9000\" holds credentials. A spec holds no credentials (it is compiled into the Nomad job, which anyone who can read the job sees). Locally the workers use the AWS chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment, or a profile in ~/.aws. On Nomad they read them from the Nomad Variable nomad/jobs/<run>/worker (`nomad var put nomad/jobs/<run>/worker aws_access_key_id=... aws_secret_access_key=...`), or from an instance role with credentials = \"node\".",
		}},
		{"storage_conflict.hcl", []string{
			"storage_conflict.hcl:4:5-4:17: error: Conflicting storage settings; storage_path and the storage block (at storage_conflict.hcl:5,5-12) both say where the run is kept; move the path into the storage block as path = ... and remove storage_path.",
		}},
		{"storage_directory.hcl", []string{
			"storage_directory.hcl:6:21-6:33: error: Invalid endpoint; endpoint \"minio:9000\" must be an http:// or https:// URL, such as \"https://minio.example:9000\".",
			"storage_directory.hcl:8:21-8:28: error: Invalid value; credentials must be one of \"variable\" or \"node\"; got \"vault\".",
			"storage_directory.hcl:6:7-6:15: error: Object store option on a directory; endpoint applies to an s3://bucket/prefix path; \"/mnt/results\" is a directory.",
			"storage_directory.hcl:7:7-7:13: error: Object store option on a directory; region applies to an s3://bucket/prefix path; \"/mnt/results\" is a directory.",
			"storage_directory.hcl:8:7-8:18: error: Object store option on a directory; credentials applies to an s3://bucket/prefix path; \"/mnt/results\" is a directory.",
		}},
		{"syntax_error.hcl", []string{
			"syntax_error.hcl:2:38-3:1: error: Invalid single-argument block definition; An argument definition on the same line as its containing block creates a single-line block definition, which must also be closed on the same line. Place the block's closing brace immediately after the argument definition.",
		}},
		{"undeclared_variable.hcl", []string{
			"undeclared_variable.hcl:8:22-8:29: error: Unsupported attribute; This object does not have an attribute named \"worker\".",
		}},
		{"unknown_attribute.hcl", []string{
			"unknown_attribute.hcl:4:5-4:15: error: Unsupported argument; An argument named \"num_worker\" is not expected here. Did you mean \"num_workers\"?",
		}},
		{"unknown_block.hcl", []string{
			"unknown_block.hcl:3:3-3:11: error: Unsupported block type; Blocks of type \"scalling\" are not expected here. Did you mean \"scaling\"?",
		}},
		{"unknown_builtin.hcl", []string{
			"unknown_builtin.hcl:3:15-3:27: error: Unknown builtin; There is no builtin \"quickstrat\"; known builtins are \"external\", \"mnist-cnn\", \"mnist-logreg\", \"mnist-mlp\" or \"quickstart\". Did you mean \"quickstart\"?",
		}},
		{"unknown_function.hcl", []string{
			"unknown_function.hcl:3:15-3:19: error: Call to unknown function; There is no function named \"file\". Did you mean \"title\"?",
		}},
		{"variable_without_value.hcl", []string{
			"variable_without_value.hcl:1:1-1:19: error: No value for variable; Variable \"workers\" has no default. Set it with -var workers=..., in a -var-file, or with the environment variable NOMAD_VAR_workers.",
		}},
		{"volume_bad.hcl", []string{
			"volume_bad.hcl:5:19-5:24: error: Invalid value; type must be one of \"host\" or \"csi\"; got \"nfs\".",
			"volume_bad.hcl:7:19-7:31: error: Mount destination not absolute; destination is where the volume appears in every worker, an absolute path such as \"/mnt/shared\"; got \"mnt/shared\".",
			"volume_bad.hcl:13:5-13:16: error: Setting of a CSI volume; access_mode applies to a volume of type \"csi\", not to a host volume.",
			"volume_bad.hcl:18:19-18:27: error: Two volumes at one destination; Another volume is mounted at /mnt/a (volume_bad.hcl:12,5-27).",
			"volume_bad.hcl:15:3-15:15: error: Missing CSI modes; A CSI volume needs access_mode (one of \"single-node-reader-only\", \"single-node-writer\", \"multi-node-reader-only\", \"multi-node-single-writer\" or \"multi-node-multi-writer\") and attachment_mode (\"file-system\" or \"block-device\").",
			"volume_bad.hcl:24:23-24:47: error: Read-only access mode; A volume with access mode \"multi-node-reader-only\" must be mounted with read_only = true.",
			"volume_bad.hcl:31:23-31:43: error: Volume for one worker; Access mode \"single-node-writer\" lets one allocation claim the volume, and 4 workers would; use a multi-node mode, or per_alloc = true for one volume per worker.",
			"volume_bad.hcl:34:10-34:15: error: Duplicate volume; Volume \"one\" is defined twice; the first is at volume_bad.hcl:27,3-15.",
		}},
		{"wrong_type.hcl", []string{
			"wrong_type.hcl:4:19-4:25: error: Incorrect attribute value type; Inappropriate value for attribute \"num_workers\": a number is required.",
			"wrong_type.hcl:5:19-5:31: error: Incorrect attribute value type; Inappropriate value for attribute \"use_gpu\": a bool is required.",
		}},
		{"zero_workers.hcl", []string{
			"zero_workers.hcl:4:19-4:20: error: Invalid value; num_workers must be at least 1; got 0.",
		}},
	}
	files, err := filepath.Glob("testdata/bad/*.hcl")
	must.NoError(t, err)
	must.Eq(t, len(files), len(cases), must.Sprint("every testdata/bad file needs a case"))
	must.GreaterEq(t, 15, len(files)) // the issue asks for at least 15 bad specs
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("testdata/bad", tc.file))
			must.NoError(t, err)
			spec, diags := Parse(src, tc.file, ParseOptions{})
			must.Nil(t, spec)
			must.True(t, diags.HasErrors())
			must.Eq(t, tc.want, diagLines(diags))
		})
	}
}
