package tune

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata")

// runScript feeds a scheduler the scripted calls of a testdata/*.script
// file and returns the transcript: every call with the decision it got.
// Results of a trial the scheduler stopped are not delivered, as the tuner
// would not see them.
//
//	add <trial> [config JSON]
//	result <trial> <time> <value> [ckpt]
//	complete <trial>
func runScript(t *testing.T, s Scheduler, path string) string {
	t.Helper()
	f, err := os.Open(path)
	must.NoError(t, err)
	defer f.Close()
	var out strings.Builder
	stopped := map[string]bool{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch f[0] {
		case "add":
			var cfg map[string]any
			if len(f) > 2 {
				must.NoError(t, json.Unmarshal([]byte(strings.Join(f[2:], " ")), &cfg), must.Sprintf("line %d", n))
				cfg = normalizeNumbers(cfg).(map[string]any)
			}
			s.OnTrialAdd(f[1], cfg)
			fmt.Fprintf(&out, "%s\n", line)
		case "result":
			must.SliceLen(t, 4, f[:min(len(f), 4)], must.Sprintf("line %d", n))
			if stopped[f[1]] {
				continue
			}
			tm, err := strconv.ParseFloat(f[2], 64)
			must.NoError(t, err)
			v, err := strconv.ParseFloat(f[3], 64)
			must.NoError(t, err)
			d := s.OnResult(Result{Trial: f[1], Time: tm, Value: v, Checkpoint: len(f) > 4 && f[4] == "ckpt"})
			fmt.Fprintf(&out, "%s -> %s", line, d.Action)
			if d.Donor != "" {
				cfg, _ := json.Marshal(d.Config)
				fmt.Fprintf(&out, " donor=%s config=%s", d.Donor, cfg)
			}
			if d.Reason != "" {
				fmt.Fprintf(&out, " (%s)", d.Reason)
			}
			out.WriteByte('\n')
			if d.Action == Stop {
				stopped[f[1]] = true
				s.OnTrialComplete(f[1])
			}
		case "scheduler": // read by scriptScheduler
		case "complete":
			s.OnTrialComplete(f[1])
			fmt.Fprintf(&out, "%s\n", line)
		default:
			t.Fatalf("%s:%d: unknown command %q", path, n, f[0])
		}
	}
	must.NoError(t, sc.Err())
	return out.String()
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		must.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	must.NoError(t, err, must.Sprint("run go test -update to create it"))
	must.EqOp(t, string(want), got)
}

// TestSchedulerTranscripts runs every testdata/*.script against the
// scheduler its first "scheduler" line builds through the registry, as
// train.hcl's scheduler block does:
//
//	scheduler <type> metric=<m> mode=<min|max> seed=<n> [settings JSON]
//
// A new scheduler needs only its own file and a script with its golden
// transcript (go test -update writes the golden).
func TestSchedulerTranscripts(t *testing.T) {
	scripts, err := filepath.Glob(filepath.Join("testdata", "*.script"))
	must.NoError(t, err)
	must.SliceNotEmpty(t, scripts)
	covered := map[string]bool{}
	for _, path := range scripts {
		name := strings.TrimSuffix(filepath.Base(path), ".script")
		t.Run(name, func(t *testing.T) {
			kind, build := scriptScheduler(t, path)
			covered[kind] = true
			s, err := build()
			must.NoError(t, err)
			got := runScript(t, s, path)
			checkGolden(t, name, got)
			// Pure: a second scheduler fed the same script agrees.
			s2, err := build()
			must.NoError(t, err)
			must.EqOp(t, got, runScript(t, s2, path))
		})
	}
	for _, kind := range SchedulerKinds() {
		if kind != "fifo" {
			must.True(t, covered[kind], must.Sprintf("scheduler %q has no transcript in testdata", kind))
		}
	}
}

// scriptScheduler reads the scheduler line of a script and returns the
// scheduler's kind and a constructor for it.
func scriptScheduler(t *testing.T, path string) (string, func() (Scheduler, error)) {
	t.Helper()
	data, err := os.ReadFile(path)
	must.NoError(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(strings.TrimSpace(line), " ", 6)
		if f[0] != "scheduler" {
			continue
		}
		must.SliceLen(t, 6, f[:min(len(f), 6)], must.Sprintf("%s: want scheduler <type> metric= mode= seed= {settings}", path))
		o := Objective{Metric: strings.TrimPrefix(f[2], "metric="), Mode: strings.TrimPrefix(f[3], "mode=")}
		seed, err := strconv.ParseUint(strings.TrimPrefix(f[4], "seed="), 10, 64)
		must.NoError(t, err)
		settings, err := ParseScheduler(f[1], []byte(f[5]), o.Metric)
		must.NoError(t, err)
		return f[1], func() (Scheduler, error) { return settings.Build(o, seed) }
	}
	t.Fatalf("%s: no scheduler line", path)
	return "", nil
}
