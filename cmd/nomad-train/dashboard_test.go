package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

var (
	screenshot    = flag.String("screenshot", "", "write the run page's screenshot to this PNG (docs/dashboard.png)")
	screenshotExp = flag.String("screenshot-experiment", "", "write the experiment page's screenshot to this PNG")
)

// chromium finds Debian's chromium, or skips.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (apt-get install chromium): the dashboard's browser test needs it")
	return ""
}

// startCLI starts the CLI in dir; the test's end interrupts it (if it is
// still running) and waits for it.
func startCLI(t *testing.T, bin, dir string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=")
	must.NoError(t, cmd.Start())
	t.Cleanup(func() { stopCLI(t, cmd) })
	return cmd
}

// stopCLI interrupts cmd as Ctrl-C does and waits for it to end.
func stopCLI(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("%s did not stop on SIGINT", cmd.Args[1])
	}
}

// startDashboard serves the dashboard of root on a free port and returns its URL.
func startDashboard(t *testing.T, bin, root string) string {
	t.Helper()
	cmd := exec.Command(bin, "dashboard", "-listen", "127.0.0.1:0", root)
	cmd.Env = append(os.Environ(), "NOMAD_ADDR=")
	out, err := cmd.StdoutPipe()
	must.NoError(t, err)
	must.NoError(t, cmd.Start())
	t.Cleanup(func() { stopCLI(t, cmd) })
	line, err := bufio.NewReader(out).ReadString('\n')
	must.NoError(t, err)
	m := regexp.MustCompile(`http://\S+/`).FindString(line)
	must.NotEq(t, "", m, must.Sprint(line))
	return m
}

// browser starts headless chromium with the flags this machine's closed
// network needs and a fresh profile.
func browser(t *testing.T) context.Context {
	t.Helper()
	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium(t)), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 960))
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(cancel3)
	return ctx
}

// eventually calls check until it returns "" (done), failing with its last
// answer when the deadline passes.
func eventually(t *testing.T, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		msg := check()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lossRecords counts a run's progress records that report loss.
func lossRecords(t *testing.T, path string) int {
	t.Helper()
	n := 0
	err := storage.ScanProgressFile(path, func(r storage.Record) error {
		if _, ok := r.Metrics["loss"]; ok {
			n++
		}
		return nil
	})
	if err != nil {
		return -1 // not there yet
	}
	return n
}

// pagePoints evaluates a script that returns the points a chart shows.
func pagePoints[T any](t *testing.T, ctx context.Context, script string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](script))
	must.NoError(t, err)
	return v
}

const lossPoints = `(() => { const c = document.querySelector('.chart[data-metric="loss"]');
	return c && c.querySelector('canvas') ? Number(c.dataset.points) : 0; })()`

// The dashboard of a real local run while it trains: the loss curve grows
// as records come, and once the run stops it has exactly one point per
// record. Then the same for an experiment's trials, overlaid.
func TestDashboardInBrowser(t *testing.T) {
	chromium(t)
	bin := buildCLI(t)
	dir := t.TempDir()
	ctx := browser(t)

	t.Run("run", func(t *testing.T) {
		spec := writeFile(t, dir, "live.hcl", `
train "live" {
  entrypoint { builtin = "quickstart" }
  config = { epochs = 100000 } # the test stops it
  scaling { num_workers = 2 }
  run {
    storage_path = "./results"
    checkpoint {
      num_to_keep     = 2
      score_attribute = "loss"
      score_order     = "min"
    }
    failure { max_failures = 2 }
  }
}
`)
		run := startCLI(t, bin, dir, "run", spec)
		progress := filepath.Join(dir, "results", "live", storage.ProgressFile)
		eventually(t, "first records", func() string {
			if lossRecords(t, progress) < 1 {
				return "no record yet"
			}
			return ""
		})
		url := startDashboard(t, bin, filepath.Join(dir, "results"))
		_, err := chromedp.Run(ctx, chromedp.Navigate(url+"#/run?key=live"))
		must.NoError(t, err)
		first := 0
		eventually(t, "loss curve shows the records", func() string {
			first = pagePoints[int](t, ctx, lossPoints)
			if n := lossRecords(t, progress); first < 1 || first > n {
				return fmt.Sprintf("%d points for %d records", first, n)
			}
			return ""
		})
		eventually(t, "loss curve grows while the run trains", func() string {
			if p := pagePoints[int](t, ctx, lossPoints); p <= first {
				return fmt.Sprintf("still %d points", p)
			}
			return ""
		})
		// A worker killed: the gang restarts in a new generation, which the
		// curve marks.
		killWorker(t, run.Process.Pid)
		eventually(t, "a restart marked on the curve", func() string {
			marks := pagePoints[int](t, ctx, `Number(document.querySelector('.chart[data-metric="loss"]').dataset.restarts)`)
			if marks < 1 {
				return "no restart marked"
			}
			return ""
		})
		stopCLI(t, run)
		n := lossRecords(t, progress)
		must.Positive(t, n)
		eventually(t, "one point per record once the run stopped", func() string {
			if p := pagePoints[int](t, ctx, lossPoints); p != n {
				return fmt.Sprintf("%d points for %d records", p, n)
			}
			return ""
		})
		ckpts := pagePoints[int](t, ctx, `document.querySelectorAll('h2 + table tr').length - 1`)
		must.Positive(t, ckpts, must.Sprint("the checkpoints table is empty"))
		if *screenshot != "" {
			png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
			must.NoError(t, err)
			must.NoError(t, os.WriteFile(*screenshot, png, 0o644))
		}
	})

	t.Run("experiment", func(t *testing.T) {
		spec := writeFile(t, dir, "exp.hcl", `
train "exp" {
  entrypoint { builtin = "quickstart" }
  config = {
    lr     = grid_search([0.01, 0.2])
    epochs = 100000
  }
  scaling { num_workers = 1 }
  run { storage_path = "./results" }
  tune {
    num_samples           = 1
    max_concurrent_trials = 2
    metric                = "loss"
    mode                  = "min"
  }
}
`)
		tuner := startCLI(t, bin, dir, "tune", spec)
		expDir := filepath.Join(dir, "results", "exp")
		counts := func() map[string]int {
			st, ok, err := tune.LoadState(context.Background(), expDir)
			if err != nil || !ok {
				return nil
			}
			out := map[string]int{}
			for _, tr := range st.Trials {
				out[tr.ID] = max(0, lossRecords(t, filepath.Join(expDir, tr.ID, storage.ProgressFile)))
			}
			return out
		}
		eventually(t, "both trials report", func() string {
			c := counts()
			for _, n := range c {
				if n < 1 {
					return fmt.Sprintf("records %v", c)
				}
			}
			if len(c) != 2 {
				return fmt.Sprintf("records %v", c)
			}
			return ""
		})
		url := startDashboard(t, bin, expDir)
		_, err := chromedp.Run(ctx, chromedp.Navigate(url+"#/exp?key=."))
		must.NoError(t, err)
		series := func() map[string]int {
			return pagePoints[map[string]int](t, ctx, `(() => { const c = document.querySelector('.chart[data-metric="loss"]');
				return c && c.querySelector('canvas') ? JSON.parse(c.dataset.seriesPoints) : {}; })()`)
		}
		var before map[string]int
		eventually(t, "both trials' loss curves", func() string {
			before = series()
			rows := pagePoints[int](t, ctx, `document.querySelectorAll('#trials tr[data-trial]').length`)
			if len(before) != 2 || rows != 2 {
				return fmt.Sprintf("series %v, %d table rows", before, rows)
			}
			return ""
		})
		eventually(t, "the curves grow while the trials train", func() string {
			now := series()
			for id, n := range before {
				if now[id] <= n {
					return fmt.Sprintf("%s still has %d points", id, now[id])
				}
			}
			return ""
		})
		stopCLI(t, tuner)
		want := counts()
		eventually(t, "one point per record once the trials stopped", func() string {
			if got := series(); fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Sprintf("points %v for records %v", got, want)
			}
			return ""
		})
		// The table sorts by a column clicked, and the other way on a second click.
		order := func() string {
			_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('#trials th[data-sort="best"]').click() || true`))
			must.NoError(t, err)
			return pagePoints[string](t, ctx, `[...document.querySelectorAll('#trials tr[data-trial]')].map((r) => r.dataset.trial).join(",")`)
		}
		asc, desc := order(), order()
		must.NotEq(t, asc, desc)
		// Each trial shows the seconds it trained (time_total_s), once the
		// tuner's last state has reached the page.
		eventually(t, "each trial's total time", func() string {
			times := pagePoints[[]float64](t, ctx, `[...document.querySelectorAll('#trials tr[data-trial] td.time')].map((td) => parseFloat(td.textContent) || 0)`)
			if len(times) != 2 || times[0] <= 0 || times[1] <= 0 {
				return fmt.Sprintf("times %v", times)
			}
			return ""
		})
		must.EqOp(t, "trial_0000,trial_0001", asc, must.Sprint("lr 0.01 reaches the lower loss"))
		best := pagePoints[string](t, ctx, `document.querySelector('.best') ? document.querySelector('.best').textContent : ""`)
		must.True(t, strings.Contains(best, `"lr"`), must.Sprint(best))
		if *screenshotExp != "" {
			png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
			must.NoError(t, err)
			must.NoError(t, os.WriteFile(*screenshotExp, png, 0o644))
		}
		// The page ranks by the experiment's own metric and mode, from its
		// state, not by a guess from the metric's name (min for a loss).
		ranking := func() string {
			return pagePoints[string](t, ctx, `document.querySelector('#metric').value + " " + document.querySelector('#mode').value`)
		}
		must.EqOp(t, "loss min", ranking())
		statePath := filepath.Join(expDir, storage.ExperimentStateFile)
		b, err := os.ReadFile(statePath)
		must.NoError(t, err)
		var raw map[string]any
		must.NoError(t, json.Unmarshal(b, &raw))
		raw["mode"] = "max"
		b, err = json.Marshal(raw)
		must.NoError(t, err)
		must.NoError(t, os.WriteFile(statePath, b, 0o644))
		_, err = chromedp.Run(ctx, chromedp.Reload())
		must.NoError(t, err)
		eventually(t, "the experiment's mode from its state", func() string {
			if got := ranking(); got != "loss max" {
				return got
			}
			return ""
		})
	})
}

// killWorker kills one of the launcher's worker processes.
func killWorker(t *testing.T, launcher int) {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", launcher)) // any thread may have started one
	must.NoError(t, err)
	var kids []string
	for _, p := range tasks {
		b, _ := os.ReadFile(p)
		kids = append(kids, strings.Fields(string(b))...)
	}
	must.SliceNotEmpty(t, kids, must.Sprint("the launcher has no worker processes"))
	var pid int
	_, err = fmt.Sscan(kids[len(kids)-1], &pid)
	must.NoError(t, err)
	must.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
}

// An experiment's scheduler decisions are marked on its curves: a trial
// the scheduler stopped with a cross at its last point, a PBT exploit with
// a line at the donor's time.
func TestDashboardMarksSchedulerDecisions(t *testing.T) {
	chromium(t)
	bin := buildCLI(t)
	dir := t.TempDir()
	for _, id := range []string{"t1", "t2"} {
		run, err := storage.Open(dir, id, storage.Policy{})
		must.NoError(t, err)
		for step := int64(1); step <= 4; step++ {
			must.NoError(t, run.Append(storage.Record{Step: step, Metrics: map[string]any{"loss": 1 / float64(step)}}))
		}
		must.NoError(t, run.Close())
	}
	writeFile(t, dir, tune.StateFile, `{"version": 1, "name": "marks", "trials": [
  {"id": "t1", "config": {"lr": 0.1}, "status": "STOPPED", "reason": "asha", "iterations": 4},
  {"id": "t2", "config": {"lr": 0.2}, "status": "TERMINATED", "iterations": 4,
   "exploits": [{"donor": "t1", "time": 2}]}]}`)
	url := startDashboard(t, bin, dir)
	ctx := browser(t)
	_, err := chromedp.Run(ctx, chromedp.Navigate(url+"#/exp?key=."))
	must.NoError(t, err)
	eventually(t, "marks on the loss curve", func() string {
		got := pagePoints[string](t, ctx, `(() => { const c = document.querySelector('.chart[data-metric="loss"]');
			return c && c.querySelector('canvas') ? c.dataset.stops + " stops, " + c.dataset.exploits + " exploits" : ""; })()`)
		if got != "1 stops, 1 exploits" {
			return got
		}
		return ""
	})
}
