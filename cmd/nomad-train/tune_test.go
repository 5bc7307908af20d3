package main

import (
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// `nomad-train tune spec.json` tunes the quickstart builtin under ASHA on
// local worker processes, prints the trial table and the best trial, and
// writes the result grid as CSV and JSON.
func TestTuneQuickstartSpec(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	spec := filepath.Join(dir, "tune.json")
	must.NoError(t, os.WriteFile(spec, []byte(`{
  "name": "qs-tune",
  "builtin": "quickstart",
  "storage_path": "./results",
  "config": {"lr": {"loguniform": [0.001, 0.1]}, "batch_size": {"grid_search": [16, 64]}, "epochs": 4, "samples": 500},
  "checkpoint": {"num_to_keep": 1},
  "tune": {"num_samples": 2, "max_concurrent_trials": 2, "metric": "loss", "mode": "min", "seed": 3,
           "scheduler": {"type": "asha", "max_t": 4, "grace_period": 1, "reduction_factor": 2}}
}`), 0o644))
	cmd := exec.Command(bin, "tune", spec)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	text := string(out)
	must.StrContains(t, text, "== qs-tune: 4 trials")
	must.StrContains(t, text, "trial  ")
	must.StrContains(t, text, "==> best trial trial_")
	f, err := os.Open(filepath.Join(dir, "results", "qs-tune", "results.csv"))
	must.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	must.NoError(t, err)
	must.Len(t, 5, rows)
	must.Eq(t, []string{"trial", "status", "iterations", "config/batch_size", "config/lr"}, rows[0][:5])
	must.FileExists(t, filepath.Join(dir, "results", "qs-tune", "results.json"))

	t.Log(text)

	// A second run finds every trial finished and runs nothing: the
	// trials' progress files are untouched.
	before, err := os.ReadFile(filepath.Join(dir, "results", "qs-tune", "trial_0000", "progress.jsonl"))
	must.NoError(t, err)
	cmd = exec.Command(bin, "tune", spec)
	cmd.Dir = dir
	out, err = cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	after, err := os.ReadFile(filepath.Join(dir, "results", "qs-tune", "trial_0000", "progress.jsonl"))
	must.NoError(t, err)
	must.Eq(t, before, after)
}
