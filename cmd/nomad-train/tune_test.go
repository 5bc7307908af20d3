package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/nomad/nomadtest"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// `nomad-train tune train.hcl` tunes the quickstart builtin under ASHA on
// local worker processes, prints the trial table and the best trial, and
// writes the result grid as CSV and JSON.
func TestTuneQuickstartSpec(t *testing.T) {
	bin := buildCLI(t)
	dir, spec := hclSpec(t, `
train "qs-tune" {
  entrypoint { builtin = "quickstart" }
  config = { lr = loguniform(0.001, 0.1), batch_size = grid_search([16, 64]), epochs = 4, samples = 500 }
  run {
    storage_path = "./results"
    checkpoint { num_to_keep = 1 }
  }
  tune {
    num_samples           = 2
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
    seed                  = 3
    scheduler {
      type             = "asha"
      max_t            = 4
      grace_period     = 1
      reduction_factor = 2
    }
  }
}`)
	cmd := localTune(bin, dir, spec)
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	text := string(out)
	must.StrContains(t, text, "== qs-tune: 4 trials")
	must.StrContains(t, text, "trial  ")
	// The best trial's config reads like the CLI's other key=value lines,
	// not like a Go map.
	must.RegexMatch(t, regexp.MustCompile(`(?m)^==> best trial trial_000\d: loss [0-9.e-]+, config batch_size=(16|64) epochs=4 lr=[0-9.e-]+ samples=500$`), text)
	rows := readCSV(t, filepath.Join(dir, "results", "qs-tune", "results.csv"))
	must.Len(t, 5, rows)
	must.Eq(t, []string{"trial", "status", "iterations", "config/batch_size", "config/lr"}, rows[0][:5])
	must.FileExists(t, filepath.Join(dir, "results", "qs-tune", "results.json"))
	must.StrContains(t, text, `==> summary of experiment "qs-tune"`)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    trial reports +\d+ \([0-9.]+/s\)$`), text)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    trials +4 \(0 failed\)$`), text)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    best checkpoint +\S+/trial_000\d/checkpoint_\d+ \(loss=[0-9.e-]+, trial trial_000\d\)$`), text)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    curves +nomad-train dashboard \./results, then http://127\.0\.0\.1:8265/#/exp\?key=qs-tune$`), text)

	t.Log(text)

	// download -spec ... best copies out the checkpoint tune named best.
	ck := regexp.MustCompile(`(?m)^    checkpoint (\S+)$`).FindStringSubmatch(text)
	must.SliceLen(t, 2, ck, must.Sprint(text))
	dl := exec.Command(bin, "download", "-spec", spec, "best", "model")
	dl.Dir = dir
	got, err := dl.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(got)))
	must.StrContains(t, string(got), ck[1]+" -> model")
	must.DirExists(t, filepath.Join(dir, "model"))

	// tensorboard writes each trial's reports as an event file.
	code, stdout, stderr := runCLI(t, "tensorboard", "-out", filepath.Join(dir, "tb"), filepath.Join(dir, "results", "qs-tune"))
	must.Zero(t, code, must.Sprint(stderr))
	must.StrContains(t, stdout, "open them with: tensorboard --logdir "+filepath.Join(dir, "tb"))
	for i := range 4 {
		files, err := filepath.Glob(filepath.Join(dir, "tb", fmt.Sprintf("trial_%04d", i), "events.out.tfevents.*.nomad-train"))
		must.NoError(t, err)
		must.SliceLen(t, 1, files, must.Sprint(stdout))
	}

	// A second run finds every trial finished and runs nothing: the
	// trials' progress files are untouched.
	before, err := os.ReadFile(filepath.Join(dir, "results", "qs-tune", "trial_0000", "progress.jsonl"))
	must.NoError(t, err)
	cmd = localTune(bin, dir, spec)
	out, err = cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	// Its summary counts the reports it made: none (not the earlier run's
	// over its own short wall time).
	must.RegexMatch(t, regexp.MustCompile(`(?m)^    trial reports +0 \(`), string(out))
	after, err := os.ReadFile(filepath.Join(dir, "results", "qs-tune", "trial_0000", "progress.jsonl"))
	must.NoError(t, err)
	must.Eq(t, before, after)

	// -fresh is refused while a tuner holds the experiment, and otherwise
	// moves it aside, whole, and runs every trial again.
	held, err := storage.OpenExperiment(context.Background(), filepath.Join(dir, "results", "qs-tune"))
	must.NoError(t, err)
	out, err = localTune(bin, dir, "-fresh", spec).CombinedOutput()
	must.Error(t, err, must.Sprint(string(out)))
	must.StrContains(t, string(out), "-fresh: a tuner is running the experiment in results/qs-tune; stop it first")
	must.NoError(t, held.Close())
	out, err = localTune(bin, dir, "-fresh", spec).CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	m := regexp.MustCompile(`(?m)^==> starting afresh: the previous experiment moved to (\S+/results/qs-tune\.old-\d{8}T\d{6}Z)$`).FindStringSubmatch(string(out))
	must.SliceLen(t, 2, m, must.Sprint(string(out)))
	moved, err := os.ReadFile(filepath.Join(m[1], "trial_0000", "progress.jsonl"))
	must.NoError(t, err)
	must.Eq(t, before, moved)
	must.FileExists(t, filepath.Join(m[1], "experiment_state.json"))
	must.StrContains(t, string(out), "== qs-tune: 4 trials")
	again, err := os.ReadFile(filepath.Join(dir, "results", "qs-tune", "trial_0000", "progress.jsonl"))
	must.NoError(t, err)
	must.NotEq(t, before, again) // trained again, at its own times
}

// Ctrl-C stops every trial and the tuner ends with 130, leaving the trials
// unfinished (PENDING) with their progress, to resume on the next run.
func TestTuneInterrupted(t *testing.T) {
	bin := buildCLI(t)
	dir, spec := hclSpec(t, `
train "long" {
  entrypoint { builtin = "quickstart" }
  config = { lr = grid_search([0.01, 0.02]), epochs = 100000, samples = 200 }
  tune {
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
  }
}`)
	cmd := localTune(bin, dir, spec)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	must.NoError(t, cmd.Start())
	exp := filepath.Join(dir, "results", "long")
	deadline := time.Now().Add(30 * time.Second)
	for {
		b0, _ := os.ReadFile(filepath.Join(exp, "trial_0000", "progress.jsonl"))
		b1, _ := os.ReadFile(filepath.Join(exp, "trial_0001", "progress.jsonl"))
		if bytes.Count(b0, []byte("\n")) >= 2 && bytes.Count(b1, []byte("\n")) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("trials never reported:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	must.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("tune did not stop after SIGINT:\n%s", out.String())
	}
	must.EqOp(t, 130, cmd.ProcessState.ExitCode(), must.Sprint(out.String()))
	must.StrContains(t, out.String(), "run it again to resume")
	state, err := os.ReadFile(filepath.Join(exp, "experiment_state.json"))
	must.NoError(t, err)
	must.EqOp(t, 2, strings.Count(string(state), `"status": "PENDING"`), must.Sprint(string(state)))
	procs, _ := filepath.Glob("/proc/[0-9]*/exe")
	for _, p := range procs {
		if target, err := os.Readlink(p); err == nil && target == bin {
			t.Errorf("worker %s still running", p)
		}
	}
}

// A trial whose workers fail beyond its failure budget ends in ERROR, and
// the command names it with the worker's error, and ends as a failed run
// does (exit status 1), saying how many trials failed.
func TestTuneTrialError(t *testing.T) {
	bin := buildCLI(t)
	// batch_size 3 does not split over 2 workers: the quickstart refuses it.
	dir, spec := hclSpec(t, `
train "bad" {
  entrypoint { builtin = "quickstart" }
  scaling { num_workers = 2 }
  config = { batch_size = grid_search([3, 4]), epochs = 1, samples = 64 }
  tune { max_concurrent_trials = 2 }
}`)
	cmd := localTune(bin, dir, spec)
	out, err := cmd.CombinedOutput()
	must.Error(t, err, must.Sprint(string(out)))
	must.EqOp(t, 1, cmd.ProcessState.ExitCode(), must.Sprint(string(out)))
	must.StrContains(t, string(out), "== bad: 2 trials (1 TERMINATED, 1 ERROR)")
	must.StrContains(t, string(out), "trial_0000 failed: ")
	must.StrContains(t, string(out), "does not split evenly over 2 workers")
	must.StrNotContains(t, string(out), "trial_0001 failed")
	must.StrHasSuffix(t, "nomad-train tune: 1 of 2 trials failed (see the table above)\n", string(out))

	// Running it again retries the failed trial (here it fails the same
	// way) and leaves the finished one alone.
	done := filepath.Join(dir, "results", "bad", "trial_0001", "progress.jsonl")
	before, err := os.ReadFile(done)
	must.NoError(t, err)
	cmd = localTune(bin, dir, spec)
	out, err = cmd.CombinedOutput()
	must.Error(t, err, must.Sprint(string(out)))
	must.StrContains(t, string(out), "== bad: retrying 1 trial that failed before\n")
	must.StrContains(t, string(out), "trial_0000 failed: ")
	after, err := os.ReadFile(done)
	must.NoError(t, err)
	must.Eq(t, before, after)
}

// A metric no trial reports (a typo for loss) is named with the metrics the
// trials did report, and the command exits with status 1.
func TestTuneMetricTypo(t *testing.T) {
	bin := buildCLI(t)
	dir, spec := hclSpec(t, `
train "typo" {
  entrypoint { builtin = "quickstart" }
  config = { lr = grid_search([0.01, 0.1]), epochs = 2, samples = 64 }
  tune {
    metric = "los"
    mode   = "min"
    scheduler {
      type         = "median"
      grace_period = 1
    }
  }
}`)
	cmd := localTune(bin, dir, spec)
	out, err := cmd.CombinedOutput()
	must.Error(t, err, must.Sprint(string(out)))
	must.EqOp(t, 1, cmd.ProcessState.ExitCode(), must.Sprint(string(out)))
	text := string(out)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^== typo: warning: metric "los" is not among the reported metrics \(.*\bloss\b.*\)$`), text)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^nomad-train tune: metric "los" is not among the reported metrics \(.*\bloss\b.*\)$`), text)
	must.StrNotContains(t, text, "best trial")
}

// A tune block's stop map ends each trial at its first report that meets
// a criterion (Ray's stop): the trials are worker processes, so one may
// have reported past it before its stop reached it, but none runs its 40
// epochs, and each ends TERMINATED saying which criterion stopped it.
func TestTuneStopCriteria(t *testing.T) {
	bin := buildCLI(t)
	dir, spec := hclSpec(t, `
train "qs-stop" {
  entrypoint { builtin = "quickstart" }
  config = { lr = grid_search([0.01, 0.05]), epochs = 40, samples = 64 }
  run { storage_path = "./results" }
  tune {
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
    stop                  = { training_iteration = 3 }
  }
}`)
	cmd := localTune(bin, dir, spec)
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	rows := readCSV(t, filepath.Join(dir, "results", "qs-stop", "results.csv"))
	must.Len(t, 3, rows)
	for _, row := range rows[1:] {
		must.EqOp(t, "TERMINATED", row[1], must.Sprint(row))
		must.EqOp(t, "reached stop training_iteration >= 3", row[len(row)-1], must.Sprint(row))
		n, err := strconv.Atoi(row[2])
		must.NoError(t, err)
		must.Between(t, 3, n, 39, must.Sprint(row))
	}
}

// `nomad-train tune train.hcl` reads the tune block and the search-space
// functions in config; -var values reach it like any spec.
func TestTuneHCLSpec(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	spec := filepath.Join(dir, "train.hcl")
	must.NoError(t, os.WriteFile(spec, []byte(`
variable "samples" { default = 1 }
train "qs-hcl" {
  entrypoint { builtin = "quickstart" }
  config = {
    lr         = loguniform(1e-3, 1e-1)
    batch_size = grid_search([16, 64])
    epochs     = 3
    samples    = 300
  }
  run { storage_path = "./results" }
  tune {
    num_samples           = var.samples
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
    scheduler {
      type         = "median"
      grace_period = 1
    }
  }
}
`), 0o644))
	cmd := localTune(bin, dir, "-var", "samples=2", spec)
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.StrContains(t, string(out), "== qs-hcl: 4 trials")
	must.StrContains(t, string(out), "==> best trial trial_")
	must.FileExists(t, filepath.Join(dir, "results", "qs-hcl", "results.csv"))

	// A spec without a tune block is refused with a clear message.
	plain, err := filepath.Abs("../../examples/quickstart/train.hcl")
	must.NoError(t, err)
	out, err = localTune(bin, dir, plain).CombinedOutput()
	must.Error(t, err)
	must.StrContains(t, string(out), "has no tune block")
}

// hclSpec writes a train.hcl experiment spec into a fresh directory.
func hclSpec(t *testing.T, body string) (dir, spec string) {
	dir = t.TempDir()
	spec = filepath.Join(dir, "train.hcl")
	must.NoError(t, os.WriteFile(spec, []byte(body), 0o644))
	return dir, spec
}

// localTune is `nomad-train tune args...` in dir, on this machine whatever
// NOMAD_ADDR the test runs with.
func localTune(bin, dir string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, append([]string{"tune"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=")
	return cmd
}

// `nomad-train tune -address ... train.hcl` runs each trial as its own
// Nomad job, on a fake Nomad whose node runs the workers (this CLI's
// quickstart builtin) on this machine: the trials' jobs are registered
// under the experiment's name, ASHA stops the two with a tiny learning rate
// through Nomad, and the results come from the shared storage.
func TestTuneOnNomad(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	storage := filepath.Join(dir, "shared")
	spec := filepath.Join(dir, "train.hcl")
	must.NoError(t, os.WriteFile(spec, []byte(fmt.Sprintf(`
train "qt" {
  entrypoint { builtin = "quickstart" }
  config = {
    lr      = grid_search([0.1, 0.05, 0.0001, 0.00005])
    epochs  = 4
    samples = 200
  }
  run { storage_path = %q }
  tune {
    num_samples           = 1
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
    seed                  = 3
    scheduler {
      type             = "asha"
      max_t            = 4
      grace_period     = 1
      reduction_factor = 2
    }
  }
}
`, storage)), 0o644))
	srv := nomadtest.New(t)
	node := nomadtest.NewNode(t, srv, nomadtest.LocalWorkers(bin, []string{"worker"}, nil))
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := dispatch(ctx, []string{"tune", "-address", node.URL, spec}, &out, &errb)
	must.EqOp(t, 0, code, must.Sprint(out.String(), errb.String()))
	must.StrContains(t, out.String(), `==> tune "qt": trials as Nomad jobs`)
	must.StrContains(t, out.String(), "==> best trial trial_")
	for i := range 4 {
		id := fmt.Sprintf("qt-trial_%04d", i)
		must.NotNil(t, srv.Job(id), must.Sprintf("no job %s", id))
		if i >= 2 {
			_, purged := srv.Stopped(id)
			must.True(t, purged, must.Sprintf("ASHA's stop of %s did not reach Nomad\n%s", id, out.String()))
		}
	}
	must.FileExists(t, filepath.Join(storage, "qt", "results.csv"))
	must.FileExists(t, filepath.Join(storage, "qt", "trial_0000", "progress.jsonl"))

	// status by the experiment's name finds its trial jobs, and the trial
	// table where they keep it.
	out.Reset()
	errb.Reset()
	code = dispatch(ctx, []string{"status", "-address", node.URL, "qt"}, &out, &errb)
	must.EqOp(t, 0, code, must.Sprint(out.String(), errb.String()))
	must.RegexMatch(t, regexp.MustCompile(`^experiment qt: 4 trial jobs on Nomad \([^)]+\), its tuner elsewhere\n== qt: 4 trials \(`), out.String())
	must.StrContains(t, out.String(), "\nbest trial trial_")

	// stop takes the experiment's name too: the tuner stopped each trial's
	// job as it ended, so there is nothing left to stop.
	out.Reset()
	errb.Reset()
	code = dispatch(ctx, []string{"stop", "-address", node.URL, "qt"}, &out, &errb)
	must.EqOp(t, 0, code, must.Sprint(out.String(), errb.String()))
	must.StrHasPrefix(t, "experiment qt: its jobs were stopped already\n", out.String())
}

// TestE2ENomadTune tunes the quickstart on a real cluster: a Nomad agent
// whose clients have nomad-driver-train, Consul for the rendezvous, and a
// directory (NOMAD_TRAIN_E2E_STORAGE) that the clients and this machine
// mount at the same path.
func TestE2ENomadTune(t *testing.T) {
	shared := os.Getenv("NOMAD_TRAIN_E2E_STORAGE")
	if os.Getenv("NOMAD_ADDR") == "" || os.Getenv("CONSUL_HTTP_ADDR") == "" || shared == "" {
		t.Skip("set NOMAD_ADDR, CONSUL_HTTP_ADDR and NOMAD_TRAIN_E2E_STORAGE (a cluster with nomad-driver-train " +
			"installed, and a directory its clients and this machine share) to tune on Nomad")
	}
	bin := buildCLI(t)
	name := "e2e-tune-" + time.Now().UTC().Format("150405")
	spec := filepath.Join(t.TempDir(), "train.hcl")
	must.NoError(t, os.WriteFile(spec, []byte(fmt.Sprintf(`
train %q {
  entrypoint { builtin = "quickstart" }
  config = {
    lr      = grid_search([0.1, 0.0001, 0.00005])
    epochs  = 4
    samples = 200
  }
  scaling { num_workers = 2 }
  run { storage_path = %q }
  tune {
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
    scheduler {
      type             = "asha"
      max_t            = 4
      grace_period     = 1
      reduction_factor = 2
    }
  }
}
`, name, shared)), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "tune", "-wait-for-capacity", spec).CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.StrContains(t, string(out), "trials as Nomad jobs")
	must.StrContains(t, string(out), "==> best trial trial_0000")
	rows := readCSV(t, filepath.Join(shared, name, "results.csv"))
	list, err := exec.CommandContext(ctx, bin, "list").CombinedOutput()
	must.NoError(t, err, must.Sprint(string(list)))
	stopped := 0
	for _, row := range rows[1:] {
		if row[1] == "STOPPED" {
			stopped++
		}
	}
	must.Positive(t, stopped, must.Sprint(string(out)))
	// ASHA's stop purges the trial's job: list counts only the others.
	must.RegexMatch(t, regexp.MustCompile(`(?m)^`+name+`\s+-\s+`+strconv.Itoa(len(rows)-1-stopped)+`\s`), string(list))
	for _, row := range rows[1:] {
		if row[1] != "STOPPED" {
			_ = exec.CommandContext(ctx, bin, "stop", "-purge", name+"-"+row[0]).Run()
		}
	}
}

// A local tune starts a command's workers the way run and the driver do: a
// program that is not a Go trainer (a shell script here, python3 train.py
// in life) runs under the external wrapper, so it gets torchrun's
// environment and the report protocol. Tune started it bare, and the
// script found neither. Its script is found beside the spec, wherever tune
// is started (it was looked for in tune's working directory).
func TestTuneWrapsACommand(t *testing.T) {
	bin := buildCLI(t)
	dir, spec := hclSpec(t, `
train "sh-tune" {
  entrypoint {
    command = "/bin/sh"
    args    = ["train.sh"]
  }
  config = { lr = grid_search([1, 2]) }
  tune {
    metric = "loss"
    mode   = "min"
  }
}`)
	must.NoError(t, os.WriteFile(filepath.Join(dir, "train.sh"), []byte(`set -e
[ -n "$MASTER_PORT" ] && [ "$WORLD_SIZE" = 1 ] || { echo "no torchrun environment" >&2; exit 1; }
printf '{"op":"report","metrics":{"loss":0.5,"rank":%s}}\n' "$RANK" >&"$NOMAD_TRAIN_REQUEST_FD"
read -r reply <&"$NOMAD_TRAIN_REPLY_FD"
`), 0o644))
	out, err := localTune(bin, t.TempDir(), spec).CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.StrContains(t, string(out), "== sh-tune: 2 trials (2 TERMINATED)")
	must.StrContains(t, string(out), "==> best trial trial_000")
}

// A Python trial gets its sampled config from nomad_train.config() and
// its trial's name from run_name(), as Ray's train_loop_per_worker gets
// its config.
func TestTunePythonTrialsGetTheirConfig(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := exec.LookPath(python); err != nil {
		t.Skipf("%s not found: %v", python, err)
	}
	bin := buildCLI(t)
	dir, spec := hclSpec(t, `
train "py-tune" {
  entrypoint {
    command = "`+python+`"
    args    = ["train.py"]
  }
  config = { lr = grid_search([0.5, 0.25]), epochs = 2 }
  tune {
    metric = "loss"
    mode   = "min"
  }
}`)
	must.NoError(t, os.WriteFile(filepath.Join(dir, "train.py"), []byte(`import nomad_train
cfg = nomad_train.config()
if not nomad_train.run_name().startswith("trial_"):
    raise SystemExit("run_name() is %r" % nomad_train.run_name())
for epoch in range(cfg["epochs"]):
    nomad_train.report({"loss": cfg["lr"] * (epoch + 1)})
`), 0o644))
	out, err := localTune(bin, dir, spec).CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.StrContains(t, string(out), "== py-tune: 2 trials (2 TERMINATED)")
	must.StrContains(t, string(out), "==> best trial trial_0001: loss 0.5, config epochs=2 lr=0.25\n")
}

// readCSV reads a whole CSV file, such as an experiment's results.csv.
func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	must.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	must.NoError(t, err)
	return rows
}
