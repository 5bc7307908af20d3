package external_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/external"
	"github.com/nomad-train/nomad-train/trainer/storage"
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

// fitScript runs argv as the command of every worker of run and returns
// the run's result, its output and its error.
func fitScript(t *testing.T, argv []string, workers int, run trainer.Run) (*trainer.Result, string, error) {
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
	return res, out.String(), err
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
			res, out, err := fitScript(t, []string{python, script}, 2, trainer.Run{Name: "fails", StoragePath: filepath.Join(dir, "results"),
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

// A SIGTERM to one worker's runtime (Nomad's alloc stop, a drain, a
// preemption) reaches the script through should_checkpoint, on every rank
// at the same step: the gang checkpoints there, the stopped worker leaves
// and is replaced, and the run goes on from that checkpoint. Every step
// runs once and is reported once; no failure is counted (the budget is 0).
func TestShouldCheckpointLosesNoStep(t *testing.T) {
	needPython(t)
	script, err := filepath.Abs("testdata/stop.py")
	must.NoError(t, err)
	stepsFile := os.Getenv("STEPS_FILE")
	if stepsFile == "" {
		stepsFile = filepath.Join(t.TempDir(), "steps")
		t.Setenv("STEPS_FILE", stepsFile)
	}
	storageDir := os.Getenv("TEST_STORAGE")
	if storageDir == "" {
		storageDir = t.TempDir()
		t.Setenv("TEST_STORAGE", storageDir)
	}
	res, out, err := fitScript(t, []string{python, script}, 2, trainer.Run{Name: "stop", StoragePath: storageDir,
		Failure: trainer.FailureConfig{MaxFailures: 0}})
	must.NoError(t, err, must.Sprint(out))
	must.SliceEmpty(t, res.Recovered, must.Sprint(out))
	must.SliceLen(t, 1, res.Replaced, must.Sprint(out))
	must.Eq(t, 1, res.Replaced[0].Rank)
	must.Eq(t, trainer.ExitStopped, res.Replaced[0].ExitCode)

	// Rank 0 ran each step once: steps 0..2 before the stop, 3..5 after.
	b, err := os.ReadFile(stepsFile)
	must.NoError(t, err)
	must.Eq(t, "0 0\n0 1\n0 2\n1 3\n1 4\n1 5\n", string(b))

	st, err := storage.OpenReadOnly(storageDir, "stop", storage.Policy{})
	must.NoError(t, err)
	defer st.Close()
	recs, err := st.Records()
	must.NoError(t, err)
	must.SliceLen(t, 6, recs)
	for i, r := range recs {
		must.Eq(t, float64(i), r.Metrics["step"].(float64), must.Sprint("a report was lost or repeated"))
		must.Eq(t, i == 2, r.Metrics["stop"].(bool))
	}
	must.NotEq(t, "", recs[2].Checkpoint) // the agreed stop's checkpoint
}

// Two ranks that save the same file name into a checkpoint fail the run at
// the first report with the rule, once, rather than being retried.
func TestSameNamedCheckpointFilesFailOnce(t *testing.T) {
	needPython(t)
	script, err := filepath.Abs("testdata/samename.py")
	must.NoError(t, err)
	res, out, err := fitScript(t, []string{python, script}, 2, trainer.Run{Name: "samename", StoragePath: t.TempDir(),
		Failure: trainer.FailureConfig{MaxFailures: 2}})
	t.Log(out)
	must.ErrorIs(t, err, trainer.ErrRunFailed)
	must.StrContains(t, err.Error(), `ranks 0 and 1 both put "model.pt" in the checkpoint`)
	must.StrContains(t, err.Error(), "a name may come from one rank only")
	must.SliceEmpty(t, res.Recovered)
}

// A script's exception on one rank of a torch gang fails the run with that
// exception, once: the other rank's Gloo error (its peer went away) is
// a consequence, not a second failure, and nothing is retried.
func TestExceptionInTorchGangReportedOnce(t *testing.T) {
	needPython(t)
	if out, err := exec.Command(python, "-c", "import torch, torch.distributed as d; assert d.is_gloo_available()").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import torch with Gloo (apt-get install python3-torch): %v: %s", python, err, out)
	}
	script, err := filepath.Abs("testdata/raise_in_gang.py")
	must.NoError(t, err)
	res, out, err := fitScript(t, []string{python, script}, 2, trainer.Run{Name: "gang", StoragePath: t.TempDir(),
		Failure: trainer.FailureConfig{MaxFailures: 2}})
	t.Log(out)
	must.ErrorIs(t, err, trainer.ErrRunFailed)
	must.StrContains(t, err.Error(), "ValueError: bad batch size on rank 1")
	must.StrNotContains(t, err.Error(), "failure budget exhausted")
	must.SliceEmpty(t, res.Recovered)
	must.Eq(t, 1, res.Errors[0].Rank, must.Sprint("the rank that raised is named first"))
}

// MASTER_PORT is the port Nomad gave rank 0's task (workerenv.TorchPort,
// "${NOMAD_PORT_torch}" in the compiled job) for every rank, and without
// one a port rank 0 found free in the torch store's range.
func TestMasterPort(t *testing.T) {
	out := os.Getenv("PORTS_FILE")
	if out == "" {
		out = filepath.Join(t.TempDir(), "ports")
		t.Setenv("PORTS_FILE", out)
	}
	cmd := []string{"/bin/sh", "-c", `echo "$RANK $MASTER_PORT" >> "$PORTS_FILE"`}
	ports := func() map[string]string {
		b, err := os.ReadFile(out)
		must.NoError(t, err)
		m := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			rank, port, _ := strings.Cut(line, " ")
			m[rank] = port
		}
		must.NoError(t, os.Remove(out))
		return m
	}

	// Workers run this function too, with the environment of the run.
	setPort := func(v string) {
		if !workerenv.IsWorker() {
			t.Setenv(workerenv.TorchPort, v)
		}
	}
	setPort("23456")
	_, log, err := fitScript(t, cmd, 2, trainer.Run{Name: "port", StoragePath: t.TempDir()})
	must.NoError(t, err, must.Sprint(log))
	must.Eq(t, map[string]string{"0": "23456", "1": "23456"}, ports())

	setPort("")
	_, log, err = fitScript(t, cmd, 2, trainer.Run{Name: "port", StoragePath: t.TempDir()})
	must.NoError(t, err, must.Sprint(log))
	got := ports()
	must.EqOp(t, got["0"], got["1"])
	port, err := strconv.Atoi(got["0"])
	must.NoError(t, err)
	must.Between(t, 15000, port, 19999)
}
