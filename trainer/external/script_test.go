package external_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/external"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// python is Debian's interpreter (python3-torch installs into it); these
// tests need no torch.
const python = "/usr/bin/python3"

func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(python); err != nil {
		t.Skipf("%s not found: %v", python, err)
	}
}

// fitScript runs argv as the command of a two-worker run with a budget of
// two failures and returns the run's result, error and output.
func fitScript(t *testing.T, argv []string, workers int, run trainer.Run) (*trainer.Result, error, string) {
	t.Helper()
	b, _ := json.Marshal(argv)
	t.Setenv(workerenv.ExternalCommand, string(b))
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	tr := trainer.New(external.Train, trainer.Scaling{NumWorkers: workers}, run, nil)
	tr.Args = []string{"-test.run=^" + t.Name() + "$"}
	var out bytes.Buffer
	tr.Stdout, tr.Stderr = &out, &out
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := tr.Fit(ctx)
	return res, err, out.String()
}

// An exception in the user's script fails the run once, with the script's
// own error, and is not retried as a lost worker until the budget is spent.
func TestFailingScriptReportedOnce(t *testing.T) {
	needPython(t)
	cases := []struct {
		name, script, want string
	}{
		{"ValueError", "import nomad_train\nraise ValueError('lr must be positive, got -1')\n", "ValueError: lr must be positive, got -1"},
		{"ImportError", "import nomad_train\nimport no_such_module_here\n", "No module named 'no_such_module_here'"},
		{"missing script", "", "can't open file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			script := filepath.Join(dir, "train.py")
			if tc.script != "" {
				must.NoError(t, os.WriteFile(script, []byte(tc.script), 0o644))
			}
			res, err, out := fitScript(t, []string{python, script}, 2, trainer.Run{Name: "fails", StoragePath: filepath.Join(dir, "results"),
				Failure: trainer.FailureConfig{MaxFailures: 2}})
			t.Log(out)
			must.ErrorIs(t, err, trainer.ErrRunFailed)
			must.StrContains(t, err.Error(), tc.want)
			must.StrNotContains(t, err.Error(), "failure budget exhausted")
			must.NotNil(t, res)
			must.SliceEmpty(t, res.Recovered)
		})
	}
}
