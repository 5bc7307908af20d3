package trainspec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/shoenig/test/must"
)

func mustParse(t *testing.T, src string, opts ParseOptions) *Spec {
	t.Helper()
	spec, diags := Parse([]byte(src), "train.hcl", opts)
	must.False(t, diags.HasErrors(), must.Sprint(diagLines(diags)))
	must.NotNil(t, spec)
	return spec
}

const minimal = `
train "tiny" {
  entrypoint { builtin = "quickstart" }
}
`

func TestDefaults(t *testing.T) {
	s := mustParse(t, minimal, ParseOptions{})
	must.Eq(t, &Spec{
		Name:       "tiny",
		Priority:   DefaultPriority,
		Entrypoint: Entrypoint{Builtin: "quickstart"},
		ConfigJSON: []byte("{}"),
		Scaling: Scaling{
			NumWorkers:         1,
			ResourcesPerWorker: Resources{Cores: 1, MemoryMB: 1024},
			PlacementStrategy:  PlacementPack,
		},
		Run: Run{
			StoragePath: "./results",
			Checkpoint:  Checkpoint{NumToKeep: 0, ScoreOrder: ScoreMax},
			Failure:     Failure{MaxFailures: 0},
		},
		Rendezvous: Rendezvous{Backend: "", Timeout: 5 * time.Minute},
		ranges:     s.ranges,
	}, s)
}

const withVars = `
variable "workers" {
  type    = number
  default = 2
}
variable "name" {
  default = "from-default"
}
variable "sizes" {
  type    = list(number)
  default = [1]
}
train "vars" {
  entrypoint {
    command = "train"
    args    = [var.name, jsonencode(var.sizes)]
  }
  scaling { num_workers = var.workers }
}
`

// TestVariablePrecedence checks Nomad's order: default < NOMAD_VAR_ env <
// -var-file (in order) < -var.
func TestVariablePrecedence(t *testing.T) {
	dir := t.TempDir()
	fileA := filepath.Join(dir, "a.hcl")
	fileB := filepath.Join(dir, "b.json")
	must.NoError(t, os.WriteFile(fileA, []byte("workers = 4\nname = \"from-file-a\"\nsizes = [2, 3]\n"), 0o644))
	must.NoError(t, os.WriteFile(fileB, []byte(`{"name": "from-file-b"}`), 0o644))
	env := map[string]string{"NOMAD_VAR_workers": "3", "NOMAD_VAR_name": "from-env", "NOMAD_VAR_sizes": "[9]"}

	cases := []struct {
		name        string
		opts        ParseOptions
		workers     int
		first, json string
	}{
		{"defaults", ParseOptions{}, 2, "from-default", "[1]"},
		{"env", ParseOptions{Getenv: mapEnv(env)}, 3, "from-env", "[9]"},
		{"var file over env", ParseOptions{Getenv: mapEnv(env), VarFiles: []string{fileA}}, 4, "from-file-a", "[2,3]"},
		{"later var file wins", ParseOptions{VarFiles: []string{fileA, fileB}}, 4, "from-file-b", "[2,3]"},
		{"-var over all", ParseOptions{Getenv: mapEnv(env), VarFiles: []string{fileA}, Vars: map[string]string{"workers": "5", "name": "from-flag", "sizes": "[5, 6]"}}, 5, "from-flag", "[5,6]"},
		{"-var string is literal", ParseOptions{Vars: map[string]string{"name": `"quoted" [x]`}}, 2, `"quoted" [x]`, "[1]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParse(t, withVars, tc.opts)
			must.Eq(t, tc.workers, s.Scaling.NumWorkers)
			must.Eq(t, []string{tc.first, tc.json}, s.Entrypoint.Args)
		})
	}
}

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestVariableErrors(t *testing.T) {
	dir := t.TempDir()
	extra := filepath.Join(dir, "extra.hcl")
	must.NoError(t, os.WriteFile(extra, []byte("workerz = 4\n"), 0o644))
	badType := filepath.Join(dir, "bad.hcl")
	must.NoError(t, os.WriteFile(badType, []byte("workers = \"many\"\n"), 0o644))
	huge := filepath.Join(dir, "huge.hcl")
	must.NoError(t, os.WriteFile(huge, []byte("workers = 1e-99999\n"), 0o644))

	cases := []struct {
		name string
		opts ParseOptions
		want []string
	}{
		{"undeclared -var", ParseOptions{Vars: map[string]string{"worker": "3"}}, []string{
			`<-var worker>:1:1-1:1: error: Undeclared variable; A value for variable "worker" was given with -var, but the spec declares no variable "worker". Did you mean "workers"?`,
		}},
		{"-var not a number", ParseOptions{Vars: map[string]string{"workers": "three"}}, []string{
			`<-var workers>:1:1-1:6: error: Invalid value for variable; The value "three" given by -var workers is not a valid number (a typed variable takes an HCL expression, such as 3 or ["a", "b"]): Variables not allowed.`,
		}},
		{"-var not an expression", ParseOptions{Vars: map[string]string{"sizes": "[1,"}}, []string{
			`<-var sizes>:1:4-1:4: error: Invalid value for variable; The value "[1," given by -var sizes is not a valid list(number) (a typed variable takes an HCL expression, such as 3 or ["a", "b"]): Missing expression.`,
		}},
		{"-var wrong type", ParseOptions{Vars: map[string]string{"sizes": `["a"]`}}, []string{
			`<-var sizes>:1:1-1:6: error: Invalid value for variable; The value "[\"a\"]" given by -var sizes is not a valid list(number) (a typed variable takes an HCL expression, such as 3 or ["a", "b"]): a number is required.`,
		}},
		{"-var number out of range", ParseOptions{Vars: map[string]string{"workers": "1e99999999"}}, []string{
			`<-var workers>:1:1-1:11: error: Invalid value for variable; The value "1e99999999" given by -var workers is not a valid number (a typed variable takes an HCL expression, such as 3 or ["a", "b"]): Number out of range.`,
		}},
		{"var file number out of range", ParseOptions{VarFiles: []string{huge}}, []string{
			huge + `:1:11-1:19: error: Number out of range; Numbers must be within the range of a 64-bit float (about 1e-308 to 1e308).`,
		}},
		{"env not a number", ParseOptions{Getenv: mapEnv(map[string]string{"NOMAD_VAR_workers": "lots"})}, []string{
			`<NOMAD_VAR_workers>:1:1-1:5: error: Invalid value for variable; The value "lots" given by NOMAD_VAR_workers is not a valid number (a typed variable takes an HCL expression, such as 3 or ["a", "b"]): Variables not allowed.`,
		}},
		{"var file wrong type", ParseOptions{VarFiles: []string{badType}}, []string{
			badType + `:1:11-1:17: error: Incorrect attribute value type; Inappropriate value for attribute "workers": a number is required.`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec, diags := Parse([]byte(withVars), "train.hcl", tc.opts)
			must.Nil(t, spec)
			must.Eq(t, tc.want, diagLines(diags))
		})
	}

	t.Run("undeclared in var file is a warning", func(t *testing.T) {
		spec, diags := Parse([]byte(withVars), "train.hcl", ParseOptions{VarFiles: []string{extra}})
		must.NotNil(t, spec)
		must.Eq(t, []string{
			extra + `:1:1-1:8: warning: Undeclared variable; The var file sets "workerz", but the spec declares no such variable; the value is ignored. Did you mean "workers"?`,
		}, diagLines(diags))
	})
	t.Run("missing var file", func(t *testing.T) {
		_, diags := Parse([]byte(withVars), "train.hcl", ParseOptions{VarFiles: []string{filepath.Join(dir, "nope.hcl")}})
		must.True(t, diags.HasErrors())
	})
	t.Run("a default of the wrong type is one error", func(t *testing.T) {
		_, diags := Parse([]byte(`
variable "w" {
  type    = number
  default = "abc"
}
train "x" {
  entrypoint { builtin = "quickstart" }
  scaling { num_workers = var.w }
}`), "train.hcl", ParseOptions{})
		must.Eq(t, []string{`train.hcl:4:13-4:18: error: Incorrect attribute value type; Inappropriate value for attribute "default": a number is required.`},
			diagLines(diags)) // not also "No value for variable"
	})
	t.Run("diagnostics show a -var's value", func(t *testing.T) {
		parser := hclparse.NewParser()
		_, diags := Parse([]byte(withVars), "train.hcl", ParseOptions{Vars: map[string]string{"workers": "three"}, Parser: parser})
		var b strings.Builder
		must.NoError(t, hcl.NewDiagnosticTextWriter(&b, parser.Files(), 78, false).WriteDiagnostics(diags))
		must.StrContains(t, b.String(), "on <-var workers> line 1:\n   1: three\n")
		must.StrNotContains(t, b.String(), "source code not available")
	})
}

func TestResourcesAndGPU(t *testing.T) {
	s := mustParse(t, `
train "g" {
  entrypoint { builtin = "quickstart" }
  scaling {
    use_gpu = true
    resources_per_worker {
      memory    = "2 GiB"
      gpu_model = "A100"
      gpu_affinity {
        attribute = "$${device.attr.cores_clock}"
        operator  = ">"
        value     = "1000 MHz"
      }
    }
    trainer_resources {}
  }
}`, ParseOptions{})
	must.Eq(t, Resources{
		Cores: 1, MemoryMB: 2048, GPU: 1,
		GPUConstraints: []DeviceConstraint{{Attribute: "${device.model}", Operator: "=", Value: "A100"}},
		GPUAffinities:  []DeviceConstraint{{Attribute: "${device.attr.cores_clock}", Operator: ">", Value: "1000 MHz", Weight: 50}},
	}, s.Scaling.ResourcesPerWorker)
	must.Eq(t, &Resources{Cores: DefaultTrainerCores, MemoryMB: DefaultTrainerMemoryMB}, s.Scaling.TrainerResources)
}

func TestParseMemory(t *testing.T) {
	for in, want := range map[string]int{"512": 512, "512 MiB": 512, "512MB": 512, "16 GiB": 16384, " 1GB ": 1024} {
		got, err := parseMemory(in)
		must.NoError(t, err)
		must.Eq(t, want, got, must.Sprint(in))
	}
	for _, in := range []string{"", "0", "1.5 GiB", "16 TiB", "-1", "99999999999 GiB", "3000000 GiB"} {
		_, err := parseMemory(in)
		must.Error(t, err, must.Sprint(in))
	}
}

func TestLocalStoragePath(t *testing.T) {
	for in, want := range map[string]string{
		"./results":               "./results",
		"/mnt/shared":             "/mnt/shared",
		"file:///mnt/shared/runs": "/mnt/shared/runs",
		"file://localhost/srv":    "/srv",
		"s3://bucket/runs":        "s3://bucket/runs",
	} {
		got, err := localStoragePath(in)
		must.NoError(t, err)
		must.Eq(t, want, got)
	}
	for _, in := range []string{"s3://", "s3:///k", "S3://b", "gs://b", "file://host/x", "file://", "HTTPS://x",
		// What the workers' parser refuses is refused here, at its line.
		"s3://AKIAIOSFODNN7EXAMPLE:secret@bucket/x", "s3://Bad_Bucket/x", "s3://ab/x", "s3://-bucket/p",
		"s3://bkt/../../etc", "s3://bucket/x?versionId=1"} {
		_, err := localStoragePath(in)
		must.Error(t, err, must.Sprint(in))
	}
	_, err := localStoragePath("s3://AKIAIOSFODNN7EXAMPLE:secret@bucket/x")
	must.ErrorContains(t, err, "credentials are not allowed")
	must.StrNotContains(t, err.Error(), "secret") // the message does not repeat it
}

// TestSHA256 wants the hash to follow the decoded settings, not the text.
func TestSHA256(t *testing.T) {
	a := mustParse(t, minimal, ParseOptions{})
	b := mustParse(t, "# a comment\ntrain \"tiny\" {\n    entrypoint {\n builtin = \"quick${\"start\"}\"\n}\n}\n", ParseOptions{})
	c := mustParse(t, `train "tiny" {
  entrypoint { builtin = "quickstart" }
  scaling { num_workers = 2 }
}`, ParseOptions{})
	must.Eq(t, a.SHA256(), b.SHA256())
	must.NotEq(t, a.SHA256(), c.SHA256())
	must.Eq(t, 64, len(a.SHA256()))
}

func TestConfigJSON(t *testing.T) {
	s := mustParse(t, `train "c" {
  entrypoint { builtin = "quickstart" }
  config = {
    z      = 1
    a      = [true, null, "x"]
    nested = { lr = 0.5, name = upper("adam") }
    big    = 12345678901234567890
  }
}`, ParseOptions{})
	must.Eq(t, `{"a":[true,null,"x"],"big":12345678901234567890,"nested":{"lr":0.5,"name":"ADAM"},"z":1}`, string(s.ConfigJSON))
}

func TestFunctionsAllowList(t *testing.T) {
	names := FunctionNames()
	for _, want := range []string{"format", "jsonencode", "lower", "upper"} {
		must.SliceContains(t, names, want)
	}
	for _, banned := range []string{"file", "range", "pow", "timestamp", "env"} {
		must.SliceNotContains(t, names, banned)
	}
}

func TestBackendFor(t *testing.T) {
	must.Eq(t, BackendEmbedded, Rendezvous{}.BackendFor(false))
	must.Eq(t, BackendConsul, Rendezvous{}.BackendFor(true))
	must.Eq(t, BackendConsul, Rendezvous{Backend: BackendConsul}.BackendFor(false))
	must.Eq(t, BackendEmbedded, Rendezvous{Backend: BackendEmbedded}.BackendFor(true))
}

// TestDocExample parses the spec shown in the package comment, so the
// documentation cannot drift into invalid syntax.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	must.NoError(t, err)
	var lines []string
	in := false
	for _, l := range strings.Split(string(doc), "\n") {
		switch {
		case strings.HasPrefix(l, "//\t"):
			in = true
			lines = append(lines, strings.TrimPrefix(l, "//\t"))
		case in && l == "//":
			lines = append(lines, "")
		case in:
			in = false
		}
		if strings.HasPrefix(l, "// The train block also takes") {
			break
		}
	}
	src := strings.Join(lines, "\n")
	must.StrContains(t, src, `train "quickstart"`)
	s := mustParse(t, src, ParseOptions{})
	must.Eq(t, 4, s.Scaling.NumWorkers)
	must.Eq(t, "loss", s.Run.Checkpoint.ScoreAttribute)
}

func TestBuiltinsOption(t *testing.T) {
	src := `train "m" {
  entrypoint { builtin = "mnist" }
}`
	_, diags := Parse([]byte(src), "train.hcl", ParseOptions{})
	must.Eq(t, []string{
		`train.hcl:2:26-2:33: error: Unknown builtin; There is no builtin "mnist"; known builtins are "external", "mnist-cnn", "mnist-logreg", "mnist-mlp" or "quickstart".`,
	}, diagLines(diags))
	s := mustParse(t, src, ParseOptions{Builtins: []string{"mnist", "quickstart"}})
	must.Eq(t, "mnist", s.Entrypoint.Builtin)
}

// A builtin's config is checked by the caller's CheckConfig, and the error
// points at the key the builtin does not know; a command's config is not
// checked, and a tune spec's search space is checked with a sample of it
// (the functions' lower bounds) in place of its functions.
func TestCheckConfigOption(t *testing.T) {
	var checked []string
	opts := ParseOptions{CheckConfig: func(builtin string, config []byte, _, _ int) error {
		checked = append(checked, builtin+" "+string(config))
		if strings.Contains(string(config), "learning_rate") {
			return errors.New(`decode train config: json: unknown field "learning_rate"`)
		}
		return nil
	}}
	src := `train "m" {
  entrypoint { builtin = "quickstart" }
  config = {
    epochs        = 3
    learning_rate = 0.1
  }
}`
	_, diags := Parse([]byte(src), "train.hcl", opts)
	must.Eq(t, []string{
		`train.hcl:5:5-5:18: error: Config the builtin cannot use; The quickstart builtin's workers would fail on this config: decode train config: json: unknown field "learning_rate".`,
	}, diagLines(diags))

	mustParse(t, `train "m" {
  entrypoint { builtin = "quickstart" }
  config = { epochs = 3 }
}`, opts)
	mustParse(t, `train "m" {
  entrypoint { command = "/bin/train" }
  config = { learning_rate = 0.1 }
}`, opts)
	mustParse(t, `train "m" {
  entrypoint { builtin = "quickstart" }
  config = { lr = loguniform(0.001, 0.1) }
  tune { num_samples = 2 }
}`, opts)
	must.Eq(t, []string{"quickstart {\"epochs\":3,\"learning_rate\":0.1}", "quickstart {\"epochs\":3}", "quickstart {\"lr\":0.001}"}, checked)
}

// keyedError is a check's error that names the setting at fault.
type keyedError struct{ key, msg string }

func (e keyedError) Error() string     { return e.msg }
func (e keyedError) ConfigKey() string { return e.key }

// The check is given the gang's sizes (an elastic gang's whole range), and
// an error that names its setting is reported at that key.
func TestCheckConfigGetsTheGang(t *testing.T) {
	var sizes [][2]int
	opts := ParseOptions{CheckConfig: func(_ string, _ []byte, minWorkers, maxWorkers int) error {
		sizes = append(sizes, [2]int{minWorkers, maxWorkers})
		if minWorkers != maxWorkers {
			return keyedError{"batch_size", "batch_size 64 does not split evenly over 3 workers"}
		}
		return nil
	}}
	mustParse(t, `train "m" {
  entrypoint { builtin = "quickstart" }
  config = { batch_size = 64 }
  scaling { num_workers = 4 }
}`, opts)
	_, diags := Parse([]byte(`train "m" {
  entrypoint { builtin = "quickstart" }
  config = {
    epochs     = 3
    batch_size = 64
  }
  scaling { num_workers = [2, 4] }
}`), "train.hcl", opts)
	must.Eq(t, [][2]int{{4, 4}, {2, 4}}, sizes)
	must.Eq(t, []string{
		`train.hcl:5:5-5:15: error: Config the builtin cannot use; The quickstart builtin's workers would fail on this config: batch_size 64 does not split evenly over 3 workers.`,
	}, diagLines(diags))
}

// A whole number above its range is told the range, not only its lower
// end: "at least 0" for 1e20 hid the maximum.
func TestIntegerOutOfRangeSaysTheRange(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"run {\ncheckpoint { num_to_keep = 1e20 }\n}", "num_to_keep must be between 0 and 2147483647; got 1e+20."},
		{"run {\ncheckpoint { num_to_keep = -1 }\n}", "num_to_keep must be at least 0; got -1."},
		{"scaling { num_workers = 1e10 }", "num_workers must be between 1 and 2147483647; got 1e+10."},
		{"scaling { num_workers = 0 }", "num_workers must be at least 1; got 0."},
		{"priority = 101", "priority must be between 1 and 100; got 101."},
	} {
		t.Run(tc.body, func(t *testing.T) {
			_, diags := Parse([]byte("train \"x\" {\nentrypoint { builtin = \"quickstart\" }\n"+tc.body+"\n}\n"), "train.hcl", ParseOptions{})
			must.SliceLen(t, 1, diags, must.Sprint(diags.Error()))
			must.EqOp(t, tc.want, diags[0].Detail)
		})
	}
}
