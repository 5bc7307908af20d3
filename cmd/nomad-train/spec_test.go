package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// runCLI runs one nomad-train command in process.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := dispatch(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

const (
	quickstart   = "../../examples/quickstart/train.hcl"
	gpuExample   = "../../examples/gpu/train.hcl"
	goldenPrefix = "../../trainspec/testdata/golden/"
)

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	must.NoError(t, err)
	return string(b)
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	must.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

func TestValidate(t *testing.T) {
	code, out, errOut := runCLI(t, "validate", quickstart)
	must.Eq(t, 0, code, must.Sprint(errOut))
	must.Eq(t, quickstart+": train \"quickstart\" is valid (4 workers)\n", out)

	dir := t.TempDir()
	bad := writeFile(t, dir, "bad.hcl", `train "x" {
  entrypoint { builtin = "quickstart" }
  scaling {
    num_worker = 4
  }
  run { storage_path = "gs://bucket" }
}
`)
	code, out, errOut = runCLI(t, "validate", bad)
	must.Eq(t, 1, code)
	must.Eq(t, "", out)
	// Every error, with file:line and the source snippet.
	for _, want := range []string{
		"Error: Unsupported argument",
		"on " + bad + " line 4, in train \"x\":",
		"   4:     num_worker = 4",
		`"num_workers"?`,
		"Error: Unsupported storage path",
		"on " + bad + " line 6, in train \"x\":",
		`   6:   run { storage_path = "gs://bucket" }`,
		"2 error(s)",
	} {
		must.StrContains(t, errOut, want)
	}
}

// A builtin's config is checked before any worker starts: a misspelt
// setting is a diagnostic at its line, naming the builtin's settings.
func TestValidateBuiltinConfig(t *testing.T) {
	bad := writeFile(t, t.TempDir(), "bad.hcl", `train "x" {
  entrypoint { builtin = "quickstart" }
  config = {
    epochs        = 3
    learning_rate = 0.1
  }
}
`)
	for _, cmd := range []string{"validate", "run", "compile"} {
		code, out, errOut := runCLI(t, cmd, bad)
		must.Eq(t, 1, code, must.Sprint(cmd))
		must.StrNotContains(t, out, "valid")
		must.StrContains(t, errOut, "on "+bad+" line 5, in train \"x\":")
		must.StrContains(t, errOut, `unknown field "learning_rate"`)
		must.StrContains(t, errOut, "its settings: lr,")
	}
}

// Each scheduler checks its own settings, and validate and tune report
// what is wrong at the setting's line: a pbt block took max_t silently.
func TestValidateSchedulerSettings(t *testing.T) {
	for _, tc := range []struct {
		name, scheduler string
		line            int
		want            string
	}{
		{"setting of another scheduler", "type = \"pbt\"\nmax_t = 9\nhyperparam_mutations = { lr = [0.1, 0.01] }", 11,
			`scheduler has no setting "max_t"`},
		{"unknown type", "type = \"hyperopt\"", 10, `Unknown scheduler "hyperopt"; the schedulers are asha, fifo, hyperband,`},
		{"negative", "type = \"asha\"\nmax_t = -1", 11, "Must be a positive number; got -1."},
		{"wrong type", "type = \"median\"\nmin_samples_required = \"three\"", 11, "Must be int, got a JSON string."},
		{"fifo takes nothing", "type = \"fifo\"\nmax_t = 3", 11, `fifo scheduler takes no settings`},
		{"pbt without mutations", "type = \"pbt\"", 9, "pbt scheduler needs hyperparam_mutations"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := writeFile(t, t.TempDir(), "tune.hcl", `train "x" {
  entrypoint { builtin = "quickstart" }
  config = { lr = choice([0.1, 0.01]) }
  tune {
    metric = "loss"
    mode   = "min"
    # the scheduler block starts on line 9
    num_samples = 2
    scheduler {
`+tc.scheduler+`
    }
  }
}
`)
			for _, cmd := range []string{"validate", "tune"} {
				code, _, errOut := runCLI(t, cmd, bad)
				must.Eq(t, 1, code, must.Sprint(cmd, errOut))
				must.StrContains(t, errOut, fmt.Sprintf("on %s line %d, in train \"x\":", bad, tc.line), must.Sprint(cmd))
				must.StrContains(t, errOut, tc.want, must.Sprint(cmd))
			}
		})
	}
	// A search_alg's settings are checked by the searcher, at the setting.
	badSearch := writeFile(t, t.TempDir(), "tune.hcl", "train \"x\" {\nentrypoint { builtin = \"quickstart\" }\nconfig = { lr = uniform(0, 1) }\ntune {\nmetric = \"loss\"\nmode = \"min\"\nsearch_alg {\ntype = \"tpe\"\nn_startup = 3\n}\n}\n}\n")
	code, _, errOut := runCLI(t, "validate", badSearch)
	must.Eq(t, 1, code)
	must.StrContains(t, errOut, fmt.Sprintf("on %s line 9, in train \"x\":", badSearch))
	must.StrContains(t, errOut, `The tpe searcher has no setting "n_startup"; it takes n_startup_trials,`)
	// A scheduler that ranks trials needs the tune block's metric.
	bad := writeFile(t, t.TempDir(), "tune.hcl", "train \"x\" {\nentrypoint { builtin = \"quickstart\" }\ntune {\nscheduler { type = \"asha\" }\n}\n}\n")
	code, _, errOut = runCLI(t, "validate", bad)
	must.Eq(t, 1, code)
	must.StrContains(t, errOut, "asha scheduler ranks trials: set metric and mode")
}

// An experiment (a tune block) is valid, and tune runs it; run and
// compile, which train one config, refuse it at its tune block.
func TestRunRefusesAnExperiment(t *testing.T) {
	const experiment = "../../examples/tune/train.hcl"
	code, out, errOut := runCLI(t, "validate", experiment)
	must.Eq(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, "\n    an experiment: 8 samples (random), 2 at a time, asha scheduler, ranked by loss (min); run it with nomad-train tune\n")
	// A grid multiplies the samples: the summary says the trials tune runs.
	grid := writeFile(t, t.TempDir(), "grid.hcl", "train \"x\" {\nentrypoint { builtin = \"quickstart\" }\n"+
		"config = {\nlr = grid_search([0.1, 0.01])\nepochs = grid_search([1, 2])\n}\ntune { num_samples = 2 }\n}\n")
	code, out, errOut = runCLI(t, "validate", grid)
	must.Eq(t, 0, code, must.Sprint(errOut))
	must.StrContains(t, out, "\n    an experiment: 8 trials (2 samples of a grid of 4, random), 1 at a time, fifo scheduler; run it with nomad-train tune\n")
	for _, cmd := range []string{"run", "compile"} {
		code, out, errOut := runCLI(t, cmd, experiment)
		must.Eq(t, 1, code, must.Sprint(cmd))
		must.Eq(t, "", out)
		must.StrContains(t, errOut, "Error: Spec with a tune block")
		must.StrContains(t, errOut, "on "+experiment+" line 23")
		must.StrContains(t, errOut, "nomad-train "+cmd+" trains one config")
	}
}

func TestValidateUsage(t *testing.T) {
	for _, args := range [][]string{
		{"validate"},
		{"validate", "a.hcl", "b.hcl"},
		{"validate", "-nope", quickstart},
		{"validate", "-var", "novalue", quickstart},
		{"compile"},
	} {
		code, _, errOut := runCLI(t, args...)
		must.Eq(t, 2, code, must.Sprint(args))
		must.StrContains(t, errOut, "Usage: nomad-train "+args[0])
	}
	code, _, errOut := runCLI(t, "validate", filepath.Join(t.TempDir(), "missing.hcl"))
	must.Eq(t, 1, code)
	must.StrContains(t, errOut, "Failed to read spec")
}

func TestCompile(t *testing.T) {
	code, out, errOut := runCLI(t, "compile", quickstart)
	must.Eq(t, 0, code, must.Sprint(errOut))
	must.Eq(t, readFile(t, goldenPrefix+"quickstart.train.nomad.hcl"), out)
	// Warnings are printed, with the snippet, and do not fail the command.
	must.StrContains(t, errOut, "Warning: Relative storage path on Nomad")
	must.StrContains(t, errOut, `  29:     storage_path = "./results"`)
	must.StrNotContains(t, errOut, "error(s)")

	dir := t.TempDir()
	outFile := filepath.Join(dir, "job.json")
	code, out, errOut = runCLI(t, "compile", "-json", quickstart, "-o", outFile) // flags after the file too
	must.Eq(t, 0, code, must.Sprint(errOut))
	must.Eq(t, "", out)
	must.Eq(t, readFile(t, goldenPrefix+"quickstart.train.json"), readFile(t, outFile))
}

// worldSize compiles gpuExample with args and returns the workers' count.
func worldSize(t *testing.T, args ...string) float64 {
	t.Helper()
	code, out, errOut := runCLI(t, append(append([]string{"compile", "-json"}, args...), gpuExample)...)
	must.Eq(t, 0, code, must.Sprint(errOut))
	var job struct {
		Job struct {
			TaskGroups []struct {
				Count float64
				Tasks []struct{ Config map[string]any }
			}
		}
	}
	must.NoError(t, json.Unmarshal([]byte(out), &job))
	g := job.Job.TaskGroups[0]
	must.Eq(t, g.Count, g.Tasks[0].Config["world_size"].(float64))
	return g.Count
}

func TestCompileVariables(t *testing.T) {
	dir := t.TempDir()
	varFile := writeFile(t, dir, "vars.hcl", "workers = 6\n")
	must.Eq(t, 8, worldSize(t))
	t.Setenv("NOMAD_VAR_workers", "5")
	must.Eq(t, 5, worldSize(t))
	must.Eq(t, 6, worldSize(t, "-var-file", varFile))
	must.Eq(t, 7, worldSize(t, "-var-file", varFile, "-var", "workers=7"))

	code, out, errOut := runCLI(t, "compile", "-var", "workers=0", gpuExample)
	must.Eq(t, 1, code)
	must.Eq(t, "", out)
	must.StrContains(t, errOut, "num_workers must be at least 1; got 0.")
	must.StrContains(t, errOut, "on "+gpuExample+" line 42")
	must.StrContains(t, errOut, "with var.workers as 0.")
}

func TestCompileErrorWritesNothing(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "bad.hcl", "train \"x\" {}\n")
	outFile := filepath.Join(dir, "job.hcl")
	code, _, errOut := runCLI(t, "compile", "-o", outFile, bad)
	must.Eq(t, 1, code)
	must.StrContains(t, errOut, "Missing entrypoint block")
	_, err := os.Stat(outFile)
	must.True(t, os.IsNotExist(err))
}

func TestFmt(t *testing.T) {
	dir := t.TempDir()
	messy := "train \"x\" {\nentrypoint {\n      builtin=\"quickstart\"\n}\n}\n"
	tidy := "train \"x\" {\n  entrypoint {\n    builtin = \"quickstart\"\n  }\n}\n"
	path := writeFile(t, dir, "train.hcl", messy)

	code, out, _ := runCLI(t, "fmt", path)
	must.Eq(t, 0, code)
	must.Eq(t, tidy, out)
	must.Eq(t, messy, readFile(t, path))

	code, out, _ = runCLI(t, "fmt", "-check", path)
	must.Eq(t, 1, code)
	must.Eq(t, path+"\n", out)

	code, out, _ = runCLI(t, "fmt", "-write", path)
	must.Eq(t, 0, code)
	must.Eq(t, path+"\n", out)
	must.Eq(t, tidy, readFile(t, path))

	code, out, _ = runCLI(t, "fmt", "-check", path, quickstart, gpuExample)
	must.Eq(t, 0, code)
	must.Eq(t, "", out)

	code, _, errOut := runCLI(t, "fmt", "-check", "-write", path)
	must.Eq(t, 2, code)
	must.StrContains(t, errOut, "exclude each other")

	broken := writeFile(t, dir, "broken.hcl", "train \"x\" {\n  a = \n}\n")
	code, _, errOut = runCLI(t, "fmt", "-write", broken)
	must.Eq(t, 1, code)
	must.StrContains(t, errOut, "on "+broken+" line 2")
	must.Eq(t, "train \"x\" {\n  a = \n}\n", readFile(t, broken))
}

func TestSpecCommandsRegistered(t *testing.T) {
	code, _, errOut := runCLI(t, "help")
	must.Eq(t, 0, code)
	for _, name := range []string{"validate", "compile", "fmt"} {
		must.StrContains(t, errOut, "  "+name)
	}
}
