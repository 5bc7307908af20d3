package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/shoenig/test/must"
)

// runIn runs the built CLI in dir, not on Nomad, and returns its output.
func runIn(t *testing.T, bin, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=")
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	return string(out)
}

// The fine-tuning example, after the quickstart as the README runs it:
// it starts from the quickstart's last checkpoint, trains epochs 20 to 29
// as a run of its own, and leaves the quickstart's checkpoint as it was.
func TestRunFinetuneExample(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	quickstart, err := filepath.Abs("../../examples/quickstart/train.hcl")
	must.NoError(t, err)
	finetune, err := filepath.Abs("../../examples/finetune/train.hcl")
	must.NoError(t, err)
	runIn(t, bin, dir, "run", quickstart)
	source := filepath.Join(dir, "results", "quickstart", "checkpoint_000019")
	before := readTree(t, source)

	text := runIn(t, bin, dir, "run", finetune)
	must.StrContains(t, text, "[rank 0] resuming after epoch 19 from ")
	must.StrNotContains(t, text, "epoch 19: loss")
	must.StrContains(t, text, "[rank 0] epoch 29: loss")
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    steps +10 \([0-9.]+/s\)$`), text)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    best checkpoint +results/quickstart-finetune/checkpoint_0000\d\d `), text)
	must.Eq(t, before, readTree(t, source))
	// Where it came from shows in the summary and in status, and stays
	// after the run has checkpoints of its own.
	must.StrContains(t, text, "    started from     "+source+" (step 20)\n")
	must.StrContains(t, runIn(t, bin, dir, "status", "quickstart-finetune"), "started from: "+source+" (step 20)\n")
	must.StrNotContains(t, runIn(t, bin, dir, "status", "quickstart"), "started from")
}

// A run that starts from another run's checkpoint at epoch 5 ends with
// parameters bit-identical to a run that trained on from that checkpoint
// itself: what the run starts from is the checkpoint, whole.
func TestResumeFromContinuesBitIdentically(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	spec := func(name string, epochs int, from string) string {
		resume := ""
		if from != "" {
			resume = fmt.Sprintf("checkpoint { resume_from = %q }", from)
		}
		return writeFile(t, dir, name+".hcl", fmt.Sprintf(`
train %q {
  entrypoint { builtin = "quickstart" }
  config = { epochs = %d }
  scaling { num_workers = 2 }
  run {
    storage_path = "./results"
    %s
  }
}
`, name, epochs, resume))
	}
	runIn(t, bin, dir, "run", spec("first", 6, ""))
	runIn(t, bin, dir, "run", spec("on", 10, "results/first/checkpoint_000005"))
	// The reference: the same run as first, told to go on to epoch 10.
	runIn(t, bin, dir, "run", spec("first", 10, ""))
	got := readTree(t, filepath.Join(dir, "results", "on", "checkpoint_000003"))
	want := readTree(t, filepath.Join(dir, "results", "first", "checkpoint_000009"))
	must.MapNotEmpty(t, got)
	must.Eq(t, want, got)
}

// readTree reads the files of a checkpoint directory but its manifest,
// whose record has the time and run of the commit.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "MANIFEST.json" {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	})
	must.NoError(t, err)
	return out
}

// Tuning a fine-tune: every trial of the experiment starts from the same
// checkpoint of another run, so each trains only the epochs after it.
func TestTuneResumeFrom(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	base := writeFile(t, dir, "base.hcl", `
train "base" {
  entrypoint { builtin = "quickstart" }
  config = { epochs = 3, samples = 500 }
  scaling { num_workers = 2 }
  run { storage_path = "./results" }
}
`)
	runIn(t, bin, dir, "run", base)
	spec := writeFile(t, dir, "ft.hcl", `
train "ft" {
  entrypoint { builtin = "quickstart" }
  config = { lr = loguniform(0.001, 0.01), epochs = 5, samples = 500 }
  run {
    storage_path = "./results"
    checkpoint { resume_from = "results/base/checkpoint_000002" }
  }
  tune {
    num_samples = 2
    metric      = "loss"
    mode        = "min"
    seed        = 3
  }
}
`)
	cmd := localTune(bin, dir, spec)
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    trials +2 \(0 failed\)$`), string(out))
	for _, trial := range []string{"trial_0000", "trial_0001"} {
		b, err := os.ReadFile(filepath.Join(dir, "results", "ft", trial, "progress.jsonl"))
		must.NoError(t, err)
		must.Len(t, 2, regexp.MustCompile(`"epoch":[34][,}]`).FindAll(b, -1), must.Sprint(trial, " trained epochs 3 and 4 only\n", string(b)))
		must.Len(t, 2, regexp.MustCompile(`(?m)^\{`).FindAll(b, -1), must.Sprint(string(b)))
	}
}
