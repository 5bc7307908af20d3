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

func TestSchedulerTranscripts(t *testing.T) {
	cases := []struct {
		name string
		make func() (Scheduler, error)
	}{
		{"asha", func() (Scheduler, error) {
			return NewASHA(ASHAConfig{Objective: Objective{Metric: "loss", Mode: ModeMin},
				MaxT: 9, GracePeriod: 1, ReductionFactor: 3, Brackets: 1})
		}},
		{"median", func() (Scheduler, error) {
			return NewMedian(MedianConfig{Objective: Objective{Metric: "acc", Mode: ModeMax},
				GracePeriod: 2, MinSamplesRequired: 2})
		}},
		{"pbt", func() (Scheduler, error) {
			return NewPBT(PBTConfig{Objective: Objective{Metric: "loss", Mode: ModeMin},
				PerturbationInterval: 2, Seed: 1,
				HyperparamMutations: map[string]any{
					"lr":         LogUniform(1e-4, 1e-1),
					"batch_size": []any{16, 32, 64, 128},
				}})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.make()
			must.NoError(t, err)
			got := runScript(t, s, filepath.Join("testdata", tc.name+".script"))
			checkGolden(t, tc.name, got)
			// Pure: a second scheduler fed the same script agrees.
			s2, err := tc.make()
			must.NoError(t, err)
			must.EqOp(t, got, runScript(t, s2, filepath.Join("testdata", tc.name+".script")))
		})
	}
}
