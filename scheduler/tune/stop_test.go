package tune

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

func TestStopCriterion(t *testing.T) {
	rec := storage.Record{Step: 4, Metrics: map[string]any{"loss": 0.25, "acc": 0.9, "nan": "NaN"}}
	for _, tc := range []struct {
		c    StopCriterion
		text string
		met  bool
	}{
		{StopCriterion{Metric: TrainingIteration, Value: 4}, "training_iteration >= 4", true},
		{StopCriterion{Metric: TrainingIteration, Value: 5}, "training_iteration >= 5", false},
		{StopCriterion{Metric: "loss", Value: 0.25, AtMost: true}, "loss <= 0.25", true},
		{StopCriterion{Metric: "loss", Value: 0.2, AtMost: true}, "loss <= 0.2", false},
		{StopCriterion{Metric: "loss", Value: 0.2}, "loss >= 0.2", true},
		{StopCriterion{Metric: "acc", Value: 0.95}, "acc >= 0.95", false},
		{StopCriterion{Metric: "missing", Value: -1}, "missing >= -1", false},
		{StopCriterion{Metric: "nan", Value: 0, AtMost: true}, "nan <= 0", false},
	} {
		must.EqOp(t, tc.text, tc.c.String())
		must.EqOp(t, tc.met, tc.c.met(rec), must.Sprint(tc.text))
	}
	c, ok := stopMet([]StopCriterion{{Metric: "acc", Value: 0.95}, {Metric: "loss", Value: 0.3, AtMost: true},
		{Metric: TrainingIteration, Value: 1}}, rec)
	must.True(t, ok)
	must.EqOp(t, "loss <= 0.3", c.String(), must.Sprint("the first met, in order"))

	_, err := New(&InProcess{Fn: synthetic(0, false, nil)}, lrSpace(1), Config{Name: "x", StoragePath: t.TempDir(),
		Stop: []StopCriterion{{Value: 1}}}).Fit(context.Background())
	must.ErrorContains(t, err, "a stop criterion needs a metric")
}

// Each trial ends TERMINATED at its first report that meets a stop
// criterion, whichever criterion that is; the scheduler still sees that
// report, and a trial that meets none runs to its end.
func TestStopCriteriaEndTrials(t *testing.T) {
	rec := &recorder{}
	var progress bytes.Buffer
	// synthLoss: lr 0.01 reports 1, 0.5, 0.333, 0.25, ...; lr 1 reports
	// 3, 2.5, ...; lr 0.1 1 + 1/(epoch+1).
	space := map[string]any{"lr": GridSearch(0.01, 0.1, 1.0), "epochs": 9}
	g, err := New(&InProcess{Fn: synthetic(0, false, nil)}, space, Config{Name: "stop", StoragePath: t.TempDir(),
		Metric: "loss", Mode: ModeMin, Scheduler: fixedScheduler{rec}, Progress: &progress,
		Stop: []StopCriterion{{Metric: "loss", Value: 0.3, AtMost: true}, {Metric: TrainingIteration, Value: 6},
			{Metric: "loss", Value: 2.6}}}).Fit(context.Background())
	must.NoError(t, err)
	type end struct {
		status     string
		iterations int
		reason     string
	}
	var got []end
	for _, tr := range g.Trials {
		got = append(got, end{tr.Status, tr.Iterations, tr.Reason})
	}
	must.Eq(t, []end{
		{StatusTerminated, 4, "reached stop loss <= 0.3"},
		{StatusTerminated, 6, "reached stop training_iteration >= 6"},
		{StatusTerminated, 1, "reached stop loss >= 2.6"},
	}, got)
	must.SliceContains(t, rec.seen, "trial_0000@4=0.25")
	must.SliceContains(t, rec.seen, fmt.Sprintf("trial_0001@6=%v", synthLoss(0.1, 5)))
	must.StrNotContains(t, progress.String(), "warning")
}

// A trial whose reports met a stop criterion before the tuner stopped
// (here: the criterion was added since) ends TERMINATED on resume, from
// its records, without running again; one that did not runs on to it.
func TestStopCriteriaOnResume(t *testing.T) {
	dir := t.TempDir()
	var starts sync.Map
	ctx, cancel := context.WithCancel(context.Background())
	fn := synthetic(0, true, &starts)
	space := map[string]any{"lr": GridSearch(0.01, 0.1), "epochs": 9}
	cfg := Config{Name: "exp", StoragePath: dir, MaxConcurrentTrials: 2, Metric: "loss", Mode: ModeMin}
	interrupt := func(c context.Context, tr *Trial) error {
		var sc synthConfig
		must.NoError(t, tr.DecodeConfig(&sc))
		n, _ := starts.LoadOrStore(tr.ID(), new(int))
		*n.(*int)++
		reports := 2
		if sc.LR == 0.01 {
			reports = 5
		}
		for epoch := tr.Iteration(); epoch < int64(reports); epoch++ {
			d, err := tr.NewCheckpointDir()
			must.NoError(t, err)
			if err := tr.Report(c, trainer.Metrics{"loss": synthLoss(sc.LR, epoch), "epoch": epoch}, d); err != nil {
				return err
			}
		}
		if sc.LR == 0.01 {
			cancel()
		}
		<-c.Done()
		return c.Err()
	}
	_, err := New(&InProcess{Fn: interrupt}, space, cfg).Fit(ctx)
	must.ErrorIs(t, err, context.Canceled)

	cfg.Stop = []StopCriterion{{Metric: TrainingIteration, Value: 4}}
	g, err := Restore(filepath.Join(dir, "exp"), &InProcess{Fn: fn}, cfg).Fit(context.Background())
	must.NoError(t, err)
	for i, want := range []struct {
		iterations, starts int
	}{{5, 1}, {4, 2}} {
		tr := g.Trials[i]
		must.EqOp(t, StatusTerminated, tr.Status, must.Sprint(tr.ID))
		must.EqOp(t, "reached stop training_iteration >= 4", tr.Reason, must.Sprint(tr.ID))
		must.EqOp(t, want.iterations, tr.Iterations, must.Sprint(tr.ID))
		n, _ := starts.Load(tr.ID)
		must.EqOp(t, want.starts, *n.(*int), must.Sprint(tr.ID))
	}
}

// A stop criterion on a metric no report holds stops nothing: the user is
// told once, and the trials run to their end.
func TestStopCriterionNotReported(t *testing.T) {
	var progress bytes.Buffer
	g, err := New(&InProcess{Fn: synthetic(0, false, nil)}, map[string]any{"lr": GridSearch(0.01, 0.1), "epochs": 3},
		Config{Name: "typo", StoragePath: t.TempDir(), MaxConcurrentTrials: 2, Metric: "loss", Mode: ModeMin,
			Progress: &progress, Stop: []StopCriterion{{Metric: "acc", Value: 0.9}}}).Fit(context.Background())
	must.NoError(t, err)
	const warning = `== typo: warning: stop criterion acc >= 0.9: metric "acc" is not among the reported metrics (epoch, loss); ` +
		"no trial stops on it until one does\n"
	must.EqOp(t, 1, strings.Count(progress.String(), warning), must.Sprint(progress.String()))
	for _, tr := range g.Trials {
		must.EqOp(t, StatusTerminated, tr.Status)
		must.EqOp(t, 3, tr.Iterations)
		must.EqOp(t, "", tr.Reason)
	}
}

// exploitAtEnd is a scheduler that exploits every trial at its eighth
// report, as PBT may at a trial's last one.
type exploitAtEnd struct {
	FIFO
	decided int
}

func (x *exploitAtEnd) OnResult(r Result) Decision {
	if r.Time < 8 {
		return Decision{Action: Continue}
	}
	x.decided++
	donor := "trial_0000"
	if r.Trial == donor {
		donor = "trial_0001"
	}
	return Decision{Action: Exploit, Donor: donor, Config: map[string]any{"lr": 0.5, "epochs": 8}}
}

// Ray's PBT examples stop each trial at its last iteration: a trial that
// reaches it ends TERMINATED there, whatever the scheduler decided (PBT
// would clone a donor into it, only for it to train again from the
// donor's step).
func TestStopCriterionOverridesTheScheduler(t *testing.T) {
	sched := &exploitAtEnd{}
	g, err := New(&InProcess{Fn: synthetic(0, true, nil)}, map[string]any{"lr": GridSearch(0.01, 0.1), "epochs": 8},
		Config{Name: "end", StoragePath: t.TempDir(), MaxConcurrentTrials: 2, Metric: "loss", Mode: ModeMin,
			Scheduler: fixedScheduler{sched}, Stop: []StopCriterion{{Metric: TrainingIteration, Value: 8}}}).Fit(context.Background())
	must.NoError(t, err)
	must.EqOp(t, 2, sched.decided)
	st, _, err := LoadState(context.Background(), g.Path)
	must.NoError(t, err)
	for _, ts := range st.Trials {
		must.EqOp(t, StatusTerminated, ts.Status)
		must.EqOp(t, "reached stop training_iteration >= 8", ts.Reason)
		must.SliceEmpty(t, ts.Exploits)
		must.EqOp(t, 8, ts.Iterations)
	}
}

// time_total_s, the seconds a trial had trained, is on every report: as
// the scheduler's time attribute and in a stop criterion (a trial's time
// budget).
func TestTimeTotalAttribute(t *testing.T) {
	rec := &timeRecorder{}
	g, err := New(&InProcess{Fn: synthetic(40*time.Millisecond, false, nil)}, map[string]any{"lr": 0.01, "epochs": 100},
		Config{Name: "timed", StoragePath: t.TempDir(), Metric: "loss", Mode: ModeMin, TimeAttr: TimeTotal,
			Scheduler: fixedScheduler{rec}, Stop: []StopCriterion{{Metric: TimeTotal, Value: 0.15}}}).Fit(context.Background())
	must.NoError(t, err)
	tr := g.Trials[0]
	must.EqOp(t, StatusTerminated, tr.Status)
	must.EqOp(t, "reached stop time_total_s >= 0.15", tr.Reason)
	// An epoch takes at least 40 ms, so the fourth report is past 0.15 s
	// at the latest (fewer on a slow machine).
	must.Between(t, 1, tr.Iterations, 4)
	must.SliceLen(t, tr.Iterations, rec.times)
	for i, at := range rec.times {
		must.Greater(t, 0.04*float64(i+1)-0.001, at, must.Sprint(rec.times))
		if i < len(rec.times)-1 {
			must.Less(t, 0.15, at, must.Sprint("stopped after the first report past 0.15 s: ", rec.times))
		}
	}
	must.GreaterEq(t, 0.15, rec.times[len(rec.times)-1])
}

// timeRecorder is a FIFO scheduler that keeps the times it is fed.
type timeRecorder struct {
	FIFO
	times []float64
}

func (r *timeRecorder) OnResult(res Result) Decision {
	r.times = append(r.times, res.Time)
	return Decision{Action: Continue}
}

// A time attribute no report holds is warned about once: the scheduler
// would see every report at time 0.
func TestTimeAttrNotReported(t *testing.T) {
	var progress bytes.Buffer
	_, err := New(&InProcess{Fn: synthetic(0, false, nil)}, map[string]any{"lr": GridSearch(0.01, 0.1), "epochs": 3},
		Config{Name: "typo", StoragePath: t.TempDir(), Metric: "loss", Mode: ModeMin, TimeAttr: "time_total",
			Progress: &progress, Scheduler: ASHASettings{MaxT: 3, GracePeriod: 1, ReductionFactor: 2}}).Fit(context.Background())
	must.NoError(t, err)
	const warning = `== typo: warning: time_attr: metric "time_total" is not among the reported metrics (epoch, loss); ` +
		"the scheduler sees every report at time 0\n"
	must.EqOp(t, 1, strings.Count(progress.String(), warning), must.Sprint(progress.String()))
}

func TestStddev(t *testing.T) {
	must.EqOp(t, 0.0, stddev([]float64{0.3, 0.3, 0.3}))
	must.InDelta(t, 2.0, stddev([]float64{2, 4, 4, 4, 5, 5, 7, 9}), 1e-12) // population, as numpy's std
}

// stop_on_plateau (Ray's TrialPlateauStopper) ends a trial once the
// spread of its last num_results values is under std, not before its
// grace_period-th report; a trial still improving runs to its end.
func TestPlateauStop(t *testing.T) {
	curves := map[string][]float64{
		"flat":      {1, 0.5, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3},
		"improving": {1, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1},
	}
	fn := func(ctx context.Context, tr *Trial) error {
		var cfg struct {
			Curve string `json:"curve"`
		}
		if err := tr.DecodeConfig(&cfg); err != nil {
			return err
		}
		for i := tr.Iteration(); i < int64(len(curves[cfg.Curve])); i++ {
			if err := tr.Report(ctx, trainer.Metrics{"loss": curves[cfg.Curve][i]}, ""); err != nil {
				return err
			}
		}
		return nil
	}
	for _, tc := range []struct {
		grace, flatIters int
	}{{4, 6}, {8, 8}} {
		t.Run(fmt.Sprint("grace ", tc.grace), func(t *testing.T) {
			g, err := New(&InProcess{Fn: fn}, map[string]any{"curve": GridSearch("flat", "improving")}, Config{Name: "p",
				StoragePath: t.TempDir(), Metric: "loss", Mode: ModeMin,
				Plateau: &PlateauStop{Metric: "loss", Std: 0.01, NumResults: 4, GracePeriod: tc.grace}}).Fit(context.Background())
			must.NoError(t, err)
			flat, improving := g.Trials[0], g.Trials[1]
			must.EqOp(t, StatusTerminated, flat.Status)
			must.EqOp(t, tc.flatIters, flat.Iterations)
			must.EqOp(t, "plateaued: loss varied by 0 (std) over its last 4 reports, under 0.01", flat.Reason)
			must.EqOp(t, StatusTerminated, improving.Status)
			must.EqOp(t, 10, improving.Iterations)
			must.EqOp(t, "", improving.Reason)
		})
	}
	_, err := New(&InProcess{Fn: fn}, map[string]any{}, Config{Name: "bad", StoragePath: t.TempDir(),
		Plateau: &PlateauStop{Metric: "loss", Std: 0.01, NumResults: 1}}).Fit(context.Background())
	must.ErrorContains(t, err, "at least 2 results")
}

// A resumed experiment follows a trial's plateau from its whole history
// (the replay feeds the stopper), not from the reports after the resume.
func TestPlateauStopOnResume(t *testing.T) {
	dir := t.TempDir()
	curve := []float64{1, 0.5, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3}
	ctx, cancel := context.WithCancel(context.Background())
	run := func(upTo int64, interrupt bool) Trainable {
		return func(c context.Context, tr *Trial) error {
			for i := tr.Iteration(); i < upTo; i++ {
				d, err := tr.NewCheckpointDir()
				if err != nil {
					return err
				}
				if err := tr.Report(c, trainer.Metrics{"loss": curve[i]}, d); err != nil {
					return err
				}
			}
			if interrupt {
				cancel()
				<-c.Done()
				return c.Err()
			}
			return nil
		}
	}
	cfg := Config{Name: "p", StoragePath: dir, Metric: "loss", Mode: ModeMin,
		Plateau: &PlateauStop{Metric: "loss", Std: 0.01, NumResults: 4, GracePeriod: 8}}
	_, err := New(&InProcess{Fn: run(5, true)}, map[string]any{}, cfg).Fit(ctx)
	must.ErrorIs(t, err, context.Canceled)
	g, err := New(&InProcess{Fn: run(10, false)}, map[string]any{}, cfg).Fit(context.Background())
	must.NoError(t, err)
	must.EqOp(t, StatusTerminated, g.Trials[0].Status)
	must.EqOp(t, 8, g.Trials[0].Iterations, must.Sprint("its eighth report, counting the five before the resume"))
	must.StrHasPrefix(t, "plateaued:", g.Trials[0].Reason)
}
