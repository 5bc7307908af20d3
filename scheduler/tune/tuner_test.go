package tune

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// synthConfig is the config of the synthetic trainable: the loss after
// epoch t is |log10(lr)+2| + 1/(t+1), so lr = 0.01 is best and every curve
// keeps its rank over time.
type synthConfig struct {
	LR     float64 `json:"lr"`
	Epochs int     `json:"epochs"`
}

func synthLoss(lr float64, epoch int64) float64 {
	return math.Abs(math.Log10(lr)+2) + 1/float64(epoch+1)
}

// synthetic returns a trainable that sleeps work per epoch and checkpoints
// every epoch when ckpt is set. starts counts attempts per trial.
func synthetic(work time.Duration, ckpt bool, starts *sync.Map) Trainable {
	return syntheticTimed(work, ckpt, starts, nil)
}

// syntheticTimed is synthetic that adds the wall time of every epoch's work
// to *worked.
func syntheticTimed(work time.Duration, ckpt bool, starts *sync.Map, worked *atomic.Int64) Trainable {
	return func(ctx context.Context, t *Trial) error {
		var cfg synthConfig
		if err := t.DecodeConfig(&cfg); err != nil {
			return err
		}
		if starts != nil {
			n, _ := starts.LoadOrStore(t.ID(), new(int))
			*n.(*int)++
		}
		for epoch := t.Iteration(); epoch < int64(cfg.Epochs); epoch++ {
			if work > 0 {
				began := time.Now()
				if err := doWork(ctx, work); err != nil {
					return err
				}
				if worked != nil {
					worked.Add(int64(time.Since(began)))
				}
			}
			dir := ""
			if ckpt {
				var err error
				if dir, err = t.NewCheckpointDir(); err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, "lr"), []byte(fmt.Sprint(cfg.LR)), 0o644); err != nil {
					return err
				}
			}
			if err := t.Report(ctx, trainer.Metrics{"loss": synthLoss(cfg.LR, epoch), "epoch": epoch}, dir); err != nil {
				return err
			}
		}
		return nil
	}
}

// doWork stands for a fixed amount of work that takes d of wall time: it
// sleeps until 1ms before the end (timer wake-ups run late by up to a
// couple of milliseconds on a loaded machine), then spins to the end, so an
// epoch lasts d, not d plus the timer's slack.
func doWork(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	if d > time.Millisecond {
		select {
		case <-time.After(d - time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for time.Now().Before(end) {
	}
	return nil
}

func lrSpace(epochs int) map[string]any {
	return map[string]any{"lr": LogUniform(1e-4, 1), "epochs": epochs}
}

func TestTuneInProcessASHAAgainstFIFO(t *testing.T) {
	run := func(sched SchedulerSettings) *ResultGrid {
		var table bytes.Buffer
		tu := New(&InProcess{Fn: synthetic(0, false, nil), Fsync: storage.FsyncCheckpointRecords}, lrSpace(9), Config{
			Name: "exp", StoragePath: t.TempDir(), NumSamples: 16, MaxConcurrentTrials: 2,
			Metric: "loss", Mode: ModeMin, Seed: 3, Scheduler: sched, Progress: &table,
		})
		g, err := tu.Fit(context.Background())
		must.NoError(t, err)
		must.StrContains(t, table.String(), "trial_0015")
		return g
	}
	fifo := run(FIFO{})
	asha := run(ASHASettings{MaxT: 9, GracePeriod: 1, ReductionFactor: 3})
	must.Eq(t, 16*9, fifo.TotalIterations())
	must.Less(t, fifo.TotalIterations()/2, asha.TotalIterations())
	bf, err := fifo.Best("", "")
	must.NoError(t, err)
	ba, err := asha.Best("", "")
	must.NoError(t, err)
	all, err := asha.BestOf("loss", ModeMin, ScopeAll)
	must.NoError(t, err)
	must.EqOp(t, ba.ID, all.ID) // losses only fall: best report is the last
	_, err = asha.BestOf("loss", ModeMin, "median")
	must.Error(t, err)
	_, err = asha.Best("accuracy", ModeMax)
	must.ErrorIs(t, err, ErrNoResult)
	// Same seed, same configs: ASHA keeps the best trial alive to the end.
	must.EqOp(t, bf.ID, ba.ID)
	must.EqOp(t, 9, ba.Iterations)
	stopped := 0
	for _, tr := range asha.Trials {
		must.EqOp(t, tr.Config["lr"], fifo.Trials[mustIndex(t, fifo, tr.ID)].Config["lr"])
		if tr.Status == StatusStopped && strings.Contains(tr.Reason, "cutoff") {
			stopped++
		}
	}
	must.Greater(t, 8, stopped)
	var csv bytes.Buffer
	must.NoError(t, asha.WriteCSV(&csv))
	must.StrHasPrefix(t, "trial,status,iterations,config/lr,metric/epoch,metric/loss,time_total_s,best_checkpoint,reason\n", csv.String())
	must.Eq(t, 17, strings.Count(csv.String(), "\n"))
	var js bytes.Buffer
	must.NoError(t, asha.WriteJSON(&js))
	var back ResultGrid
	must.NoError(t, json.Unmarshal(js.Bytes(), &back))
	must.Len(t, 16, back.Trials)
}

// readTrial reads every record of trial id's run under root (none when
// the run has not started), through storage as the tuner does.
func readTrial(root, id string) ([]storage.Record, error) {
	f, err := storage.Follow(context.Background(), root, id)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, _, err := f.NextRecords()
	return recs, err
}

func mustIndex(t *testing.T, g *ResultGrid, id string) int {
	for i, tr := range g.Trials {
		if tr.ID == id {
			return i
		}
	}
	t.Fatalf("no trial %s", id)
	return -1
}

// Grid search over two grid_search values and a choice, and the grid
// searcher that enumerates the choice too.
func TestGridSearchVariants(t *testing.T) {
	space := map[string]any{
		"opt":    map[string]any{"lr": GridSearch(0.1, 0.01), "momentum": Uniform(0, 1)},
		"layers": []any{GridSearch(8, 16), 4},
		"act":    Choice("relu", "tanh"),
	}
	gen, err := NewGenerator(space, SearchGrid, 2, 9)
	must.NoError(t, err)
	must.EqOp(t, 16, gen.Total())
	seen := map[string]int{}
	for v, ok := gen.Next(); ok; v, ok = gen.Next() {
		key := fmt.Sprint(v.Params["act"], v.Params["layers/0"], v.Params["opt/lr"])
		seen[key]++
		m := v.Config["opt"].(map[string]any)["momentum"].(float64)
		must.True(t, m >= 0 && m < 1)
		must.EqOp(t, 4, v.Config["layers"].([]any)[1].(int))
	}
	must.MapLen(t, 8, seen)
	for _, n := range seen {
		must.EqOp(t, 2, n)
	}
	// Random searcher: the same seed gives the same sequence.
	a, _ := NewGenerator(space, SearchRandom, 3, 5)
	b, _ := NewGenerator(space, SearchRandom, 3, 5)
	must.EqOp(t, 12, a.Total())
	for va, ok := a.Next(); ok; va, ok = a.Next() {
		vb, _ := b.Next()
		must.Eq(t, va.Config, vb.Config)
	}
}

func TestParseSpace(t *testing.T) {
	sp, err := ParseSpace([]byte(`{"lr":{"loguniform":[1e-4,0.1]},"batch_size":{"choice":[16,32]},
		"nested":{"q":{"quniform":[0,1,0.1]},"n":{"randint":[1,5]},"u":{"uniform":[0,2]}},
		"grid":{"grid_search":[1,2,3]},"plain":7,"list":[{"uniform":[0,1]},"x"]}`))
	must.NoError(t, err)
	gen, err := NewGenerator(sp, "", 1, 1)
	must.NoError(t, err)
	must.EqOp(t, 3, gen.Total())
	v, _ := gen.Next()
	must.EqOp(t, 1, v.Config["grid"].(int))
	must.EqOp(t, 7, v.Config["plain"].(int))
	q := v.Config["nested"].(map[string]any)["q"].(float64)
	must.EqOp(t, q, math.Round(q*10)/10)
	n := v.Config["nested"].(map[string]any)["n"].(int)
	must.True(t, n >= 1 && n < 5)
	b, err := json.Marshal(sp["lr"])
	must.NoError(t, err)
	must.EqOp(t, `{"loguniform":[0.0001,0.1]}`, string(b))
	for _, bad := range []string{`{"a":{"uniform":[1]}}`, `{"a":{"loguniform":[0,1]}}`, `{"a":{"randint":[2,1]}}`,
		`{"a":{"choice":[]}}`, `{"a":{"quniform":[0,1,0]}}`, `{"a":{"uniform":"x"}}`, `[1]`,
		// Integer bounds beyond 2^53 (IntN would panic, or lograndint
		// sample its lower bound every time).
		`{"a":{"randint":[0,1e19]}}`, `{"a":{"randint":[-9e18,9e18]}}`, `{"a":{"lograndint":[1,1e300]}}`,
		`{"a":{"qrandint":[0,1e19,1]}}`, `{"a":{"qlograndint":[1,1e300,2]}}`, `{"a":{"randint":[0,9007199254740994]}}`,
		// A width beyond the largest float.
		`{"a":{"uniform":[-1e308,1e308]}}`, `{"a":{"quniform":[-1e308,1e308,1e307]}}`,
		// quniform's bounds are multiples of its step, as Ray wants.
		`{"a":{"quniform":[0.1,1,0.3]}}`, `{"a":{"quniform":[0,1,0.3]}}`,
		// No multiple of the step within the bounds.
		`{"a":{"qrandint":[1,2,5]}}`, `{"a":{"qloguniform":[3,4,5]}}`, `{"a":{"qlograndint":[1,10,2.5]}}`} {
		_, err := ParseSpace([]byte(bad))
		must.ErrorIs(t, err, ErrSpace, must.Sprint(bad))
	}
	for _, good := range []string{`{"a":{"randint":[-9007199254740992,9007199254740992]}}`, `{"a":{"uniform":[-1e307,1e307]}}`,
		`{"a":{"quniform":[0.3,0.9,0.3]}}`, `{"a":{"quniform":[-1,1,0.1]}}`} {
		_, err := ParseSpace([]byte(good))
		must.NoError(t, err, must.Sprint(good))
	}
}

// A quantised function's samples are multiples of its step within its
// bounds, even where the step is a decimal fraction.
func TestQuantizedSamplesWithinBounds(t *testing.T) {
	for _, tc := range []struct {
		d      Domain
		lo, hi float64
	}{
		{QUniform(0.3, 0.9, 0.3), 0.3, 0.9},
		{QUniform(0.1, 0.7, 0.1), 0.1, 0.7},
		{QUniform(-1, 1, 0.2), -1, 1},
		{QLogUniform(0.3, 0.9, 0.3), 0.3, 0.9},
		{QRandN(0, 1, 0.1), math.Inf(-1), math.Inf(1)},
	} {
		r := rand.New(rand.NewPCG(1, 2))
		for range 20000 {
			v := tc.d.Sample(r).(float64)
			must.True(t, v >= tc.lo && v <= tc.hi, must.Sprintf("%s: %v", tc.d.Kind(), v))
		}
	}
}

// A space built in Go is checked as ParseSpace checks one, nested
// functions included: bounds that would panic in sampling, or make an
// infinity that the experiment's state cannot hold, are an error from the
// tuner.
func TestCheckSpace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		space map[string]any
		want  string
	}{
		{"randint beyond 2^53", map[string]any{"a": RandInt(-1<<62, 1<<62)}, "a: invalid param space: randint"},
		{"lograndint beyond 2^53", map[string]any{"a": LogRandInt(1, 1<<60)}, "2^53"},
		{"infinite width", map[string]any{"a": Uniform(-1e308, 1e308)}, "wider than the largest float"},
		{"reversed", map[string]any{"b": map[string]any{"c": Uniform(1, 0)}}, "b/c: invalid param space: uniform(1, 0)"},
		{"step not dividing", map[string]any{"a": QUniform(0.1, 1, 0.3)}, "lower bound 0.1 is not a multiple"},
		{"nested in a choice", map[string]any{"o": Choice("sgd", map[string]any{"m": RandInt(0, 1<<60)})}, "o/1/m: "},
		{"a choice of a function", map[string]any{"o": Choice(QRandInt(1, 2, 5))}, "no multiple of the step"},
		{"fine", map[string]any{"a": RandInt(0, 10), "o": Choice(1, Uniform(0, 1))}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSpace(tc.space)
			if tc.want == "" {
				must.NoError(t, err)
				return
			}
			must.ErrorIs(t, err, ErrSpace)
			must.StrContains(t, err.Error(), tc.want)
		})
	}
	g, err := New(&InProcess{Fn: synthetic(0, false, nil)},
		map[string]any{"a": RandInt(-1<<62, 1<<62)}, Config{Name: "wide", StoragePath: t.TempDir()}).Fit(context.Background())
	must.Nil(t, g)
	must.ErrorIs(t, err, ErrSpace)
}

// An interrupted experiment resumes: finished trials are not run again,
// the interrupted one continues where its storage left off.
func TestRestoreInProcess(t *testing.T) {
	dir := t.TempDir()
	var starts sync.Map
	ctx, cancel := context.WithCancel(context.Background())
	fn := synthetic(0, true, &starts)
	cfg := Config{Name: "exp", StoragePath: dir, NumSamples: 6, Metric: "loss", Mode: ModeMin, Seed: 1}
	// Stop the whole tuner once trial_0003 has reported twice.
	stopper := func(c context.Context, tr *Trial) error {
		if tr.ID() != "trial_0003" {
			return fn(c, tr)
		}
		var sc synthConfig
		must.NoError(t, tr.DecodeConfig(&sc))
		for epoch := tr.Iteration(); epoch < 2; epoch++ {
			d, err := tr.NewCheckpointDir()
			must.NoError(t, err)
			if err := tr.Report(c, trainer.Metrics{"loss": synthLoss(sc.LR, epoch), "epoch": epoch}, d); err != nil {
				return err
			}
		}
		cancel()
		<-c.Done()
		return c.Err()
	}
	_, err := New(&InProcess{Fn: stopper}, lrSpace(4), cfg).Fit(ctx)
	must.ErrorIs(t, err, context.Canceled)
	st, ok, err := LoadState(context.Background(), filepath.Join(dir, "exp"))
	must.NoError(t, err)
	must.True(t, ok)
	for i, ts := range st.Trials {
		want := StatusPending
		if i < 3 {
			want = StatusTerminated
		}
		must.EqOp(t, want, ts.Status, must.Sprint(ts.ID))
	}

	_, err = Restore(filepath.Join(dir, "nothing"), &InProcess{Fn: fn}, cfg).Fit(context.Background())
	must.ErrorIs(t, err, ErrNoExperiment)
	must.DirNotExists(t, filepath.Join(dir, "nothing"))
	grid, err := Restore(filepath.Join(dir, "exp"), &InProcess{Fn: fn}, cfg).Fit(context.Background())
	must.NoError(t, err)
	for _, tr := range grid.Trials {
		must.EqOp(t, StatusTerminated, tr.Status)
		must.EqOp(t, 4, tr.Iterations, must.Sprint(tr.ID)) // nothing reported twice
		// trials 0-2 ran once in the first Fit, never again; trial 3 ran
		// by the stopper first, then once here from its checkpoint.
		n, _ := starts.Load(tr.ID)
		must.EqOp(t, 1, *n.(*int), must.Sprint(tr.ID))
	}
}

// A trial that fails is restarted within its failure budget, and ends in
// ERROR beyond it.
func TestFailureBudget(t *testing.T) {
	for _, tc := range []struct {
		budget int
		want   string
	}{{1, StatusTerminated}, {0, StatusError}} {
		t.Run(fmt.Sprint(tc.budget), func(t *testing.T) {
			fails := 0
			fn := func(ctx context.Context, tr *Trial) error {
				if tr.Iteration() == 0 {
					d, err := tr.NewCheckpointDir()
					must.NoError(t, err)
					must.NoError(t, tr.Report(ctx, trainer.Metrics{"loss": 1.0}, d))
					fails++
					return errors.New("boom")
				}
				return tr.Report(ctx, trainer.Metrics{"loss": 0.5}, "")
			}
			g, err := New(&InProcess{Fn: fn}, map[string]any{}, Config{Name: "e", StoragePath: t.TempDir(),
				MaxFailures: tc.budget}).Fit(context.Background())
			must.NoError(t, err)
			must.EqOp(t, tc.want, g.Trials[0].Status)
			must.EqOp(t, 1, fails)
			if tc.want == StatusError {
				must.StrContains(t, g.Trials[0].Reason, "boom")
			}
		})
	}
}

// PBT clones a better trial's checkpoint into a worse one and restarts it
// with a perturbed config; the restarted trial reads the donor's files.
func TestPBTExploitsInProcess(t *testing.T) {
	var mu sync.Mutex
	restoredFrom := map[string]string{} // trial -> lr read from its first checkpoint
	fn := func(ctx context.Context, tr *Trial) error {
		var cfg synthConfig
		if err := tr.DecodeConfig(&cfg); err != nil {
			return err
		}
		if ck := tr.Checkpoint(); ck != "" {
			b, err := os.ReadFile(filepath.Join(ck, "lr"))
			if err != nil {
				return err
			}
			mu.Lock()
			restoredFrom[tr.ID()] = string(b)
			mu.Unlock()
		}
		for epoch := tr.Iteration(); epoch < int64(cfg.Epochs); epoch++ {
			dir, err := tr.NewCheckpointDir()
			if err != nil {
				return err
			}
			os.WriteFile(filepath.Join(dir, "lr"), []byte(fmt.Sprint(cfg.LR)), 0o644)
			if err := tr.Report(ctx, trainer.Metrics{"loss": synthLoss(cfg.LR, epoch)}, dir); err != nil {
				return err
			}
		}
		return nil
	}
	space := map[string]any{"lr": GridSearch(0.01, 0.02, 0.3, 0.9), "epochs": 8}
	g, err := New(&InProcess{Fn: fn}, space, Config{Name: "pbt", StoragePath: t.TempDir(),
		MaxConcurrentTrials: 4, Metric: "loss", Mode: ModeMin, Seed: 2,
		Scheduler: PBTSettings{PerturbationInterval: 2,
			HyperparamMutations: map[string]any{"lr": LogUniform(1e-3, 1)}},
	}).Fit(context.Background())
	must.NoError(t, err)
	st, _, err := LoadState(context.Background(), g.Path)
	must.NoError(t, err)
	exploits := 0
	for _, ts := range st.Trials {
		exploits += len(ts.Exploits)
		must.EqOp(t, StatusTerminated, ts.Status)
	}
	must.Positive(t, exploits)
	must.MapNotEmpty(t, restoredFrom)
	for _, ts := range st.Trials {
		recs, err := readTrial(g.Path, ts.ID)
		must.NoError(t, err)
		must.EqOp(t, int64(8), recs[len(recs)-1].Step) // every trial reaches epoch 8
		// Each exploit wrote a clone record; a later exploit from a donor
		// at a lower step rolls the history back past the earlier ones'
		// (the trial restarts from the clone and drops what came after its
		// step), so the file holds at most one per exploit, the last one
		// always.
		var clones []any
		for _, r := range recs {
			if d := r.Metrics[ClonedFrom]; d != nil {
				clones = append(clones, d)
			}
		}
		must.LessEq(t, len(ts.Exploits), len(clones))
		if len(ts.Exploits) > 0 {
			must.SliceNotEmpty(t, clones)
			must.Eq[any](t, ts.Exploits[len(ts.Exploits)-1].Donor, clones[len(clones)-1])
		}
	}
}

// The time budget stops running trials and starts no more, also across a
// restart; a second tuner on the same experiment is refused meanwhile.
func TestTimeBudget(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Name: "tb", StoragePath: dir, NumSamples: 3, Metric: "loss", Mode: ModeMin,
		TimeBudget: 300 * time.Millisecond}
	fn := func(ctx context.Context, tr *Trial) error {
		if tr.ID() == "trial_0000" && tr.Iteration() == 0 {
			// While it runs, the experiment is locked.
			_, err := New(&InProcess{Fn: synthetic(0, false, nil)}, lrSpace(1), cfg).Fit(ctx)
			must.ErrorIs(t, err, ErrLocked)
		}
		return synthetic(20*time.Millisecond, false, nil)(ctx, tr)
	}
	start := time.Now()
	g, err := New(&InProcess{Fn: fn}, lrSpace(1000), cfg).Fit(context.Background())
	must.NoError(t, err)
	must.Less(t, 5*time.Second, time.Since(start))
	must.EqOp(t, StatusStopped, g.Trials[0].Status)
	must.EqOp(t, "time budget spent", g.Trials[0].Reason)
	must.Positive(t, g.Trials[0].Iterations)
	must.EqOp(t, StatusPending, g.Trials[1].Status)
	must.EqOp(t, StatusPending, g.Trials[2].Status)

	g, err = New(&InProcess{Fn: fn}, lrSpace(1000), cfg).Fit(context.Background())
	must.NoError(t, err)
	must.EqOp(t, StatusPending, g.Trials[1].Status)
	must.EqOp(t, 0, g.Trials[1].Iterations)
}

// recorder is a scheduler that records the results it is fed.
type recorder struct {
	FIFO
	mu   sync.Mutex
	seen []string
}

func (r *recorder) OnResult(res Result) Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, fmt.Sprintf("%s@%v=%v", res.Trial, res.Time, res.Value))
	return Decision{Action: Continue}
}

// A trial that fails after its checkpoint restarts from it: the reports
// after the checkpoint are rolled back (the progress file is rewritten),
// the tuner's tail notices and feeds the scheduler only the new reports.
func TestRollbackAfterFailure(t *testing.T) {
	rec := &recorder{}
	attempt := 0
	fn := func(ctx context.Context, tr *Trial) error {
		attempt++
		for step := tr.Iteration(); step < 4; step++ {
			dir := ""
			if step == 0 {
				var err error
				dir, err = tr.NewCheckpointDir()
				must.NoError(t, err)
			}
			if err := tr.Report(ctx, trainer.Metrics{"loss": float64(10*attempt) + float64(step)}, dir); err != nil {
				return err
			}
			if attempt == 1 && step == 2 {
				return errors.New("crash after three reports")
			}
		}
		return nil
	}
	g, err := New(&InProcess{Fn: fn}, map[string]any{}, Config{Name: "rb", StoragePath: t.TempDir(),
		Metric: "loss", Mode: ModeMin, MaxFailures: 1,
		Scheduler: fixedScheduler{rec}}).Fit(context.Background())
	must.NoError(t, err)
	must.Eq(t, []string{"trial_0000@1=10", "trial_0000@2=11", "trial_0000@3=12", "trial_0000@2=21", "trial_0000@3=22", "trial_0000@4=23"}, rec.seen)
	must.EqOp(t, StatusTerminated, g.Trials[0].Status)
	must.EqOp(t, 4, g.Trials[0].Iterations)
	st, _, err := LoadState(context.Background(), g.Path)
	must.NoError(t, err)
	must.EqOp(t, 4, st.Trials[0].Iterations)
	must.EqOp(t, 1, st.Trials[0].Failures)
}

// Trials that ended in ERROR (say, while what they train against was
// unreachable) are retried when the experiment is run again: each from its
// latest checkpoint, with a fresh failure budget, while its failure count
// keeps the history. Finished trials stay as they are.
func TestResumeRetriesErrored(t *testing.T) {
	dir := t.TempDir()
	var outage atomic.Int32 // failures still to inject into trial_0000
	var mu sync.Mutex
	startedAt := map[string][]int64{} // trial -> the iteration each attempt started from
	fn := func(ctx context.Context, tr *Trial) error {
		var cfg synthConfig
		if err := tr.DecodeConfig(&cfg); err != nil {
			return err
		}
		mu.Lock()
		startedAt[tr.ID()] = append(startedAt[tr.ID()], tr.Iteration())
		mu.Unlock()
		for epoch := tr.Iteration(); epoch < int64(cfg.Epochs); epoch++ {
			d, err := tr.NewCheckpointDir()
			if err != nil {
				return err
			}
			if err := tr.Report(ctx, trainer.Metrics{"loss": synthLoss(cfg.LR, epoch)}, d); err != nil {
				return err
			}
			if tr.ID() == "trial_0000" && outage.Add(-1) >= 0 {
				return errors.New("dial tcp 127.0.0.1:4646: connection refused")
			}
		}
		return nil
	}
	space := map[string]any{"lr": GridSearch(0.01, 0.1), "epochs": 4}
	cfg := Config{Name: "retry", StoragePath: dir, Metric: "loss", Mode: ModeMin, MaxFailures: 1}

	outage.Store(2) // beyond the budget: trial_0000 fails twice and ends in ERROR
	g, err := New(&InProcess{Fn: fn}, space, cfg).Fit(context.Background())
	must.NoError(t, err)
	must.EqOp(t, 1, g.NumErrors())
	must.EqOp(t, StatusError, g.Trials[0].Status)
	must.EqOp(t, 2, g.Trials[0].Failures)
	must.StrContains(t, g.Trials[0].Reason, "connection refused")
	must.EqOp(t, StatusTerminated, g.Trials[1].Status)

	// With the time budget spent, nothing runs again, and the failed
	// trial stays failed, not pending.
	spent := cfg
	spent.TimeBudget = time.Nanosecond
	g, err = New(&InProcess{Fn: fn}, space, spent).Fit(context.Background())
	must.NoError(t, err)
	must.EqOp(t, 1, g.NumErrors())
	must.EqOp(t, StatusError, g.Trials[0].Status)

	// One more failure, within the fresh budget of the second run.
	outage.Store(1)
	var progress bytes.Buffer
	cfg.Progress = &progress
	g, err = New(&InProcess{Fn: fn}, space, cfg).Fit(context.Background())
	must.NoError(t, err)
	must.StrContains(t, progress.String(), "== retry: retrying 1 trial that failed before\n")
	must.EqOp(t, 0, g.NumErrors())
	must.EqOp(t, StatusTerminated, g.Trials[0].Status, must.Sprint(g.Trials[0].Reason))
	must.EqOp(t, 4, g.Trials[0].Iterations)
	must.EqOp(t, 3, g.Trials[0].Failures)
	must.EqOp(t, StatusTerminated, g.Trials[1].Status)
	mu.Lock()
	defer mu.Unlock()
	must.Eq(t, []int64{0, 1, 2, 3}, startedAt["trial_0000"]) // each attempt from the latest checkpoint
	must.Eq(t, []int64{0}, startedAt["trial_0001"])          // finished: not run again
}

// A metric that no trial reports (a misspelt name) is no silent no-op: the
// first report without it brings a warning naming the metrics reported,
// and Fit ends with a MetricError, also when it resumes the experiment.
// A metric that only later reports hold is fine.
func TestMetricNotReported(t *testing.T) {
	dir := t.TempDir()
	run := func(metric string) (string, error) {
		var progress bytes.Buffer
		_, err := New(&InProcess{Fn: synthetic(0, false, nil)}, map[string]any{"lr": GridSearch(0.01, 0.1, 1.0), "epochs": 3},
			Config{Name: "typo", StoragePath: dir, Metric: metric, Mode: ModeMin, Progress: &progress,
				Scheduler: MedianSettings{GracePeriod: 1, MinSamplesRequired: 1}}).Fit(context.Background())
		return progress.String(), err
	}
	const warning = `== typo: warning: metric "los" is not among the reported metrics (epoch, loss)` + "\n"
	for _, what := range []string{"run", "resumed"} {
		out, err := run("los")
		var me *MetricError
		must.True(t, errors.As(err, &me), must.Sprintf("%s: %v", what, err))
		must.EqOp(t, `metric "los" is not among the reported metrics (epoch, loss)`, err.Error())
		must.Eq(t, []string{"epoch", "loss"}, me.Reported)
		must.EqOp(t, 1, strings.Count(out, warning), must.Sprint(what, "\n", out))
	}
	out, err := run("loss")
	must.NoError(t, err)
	must.StrNotContains(t, out, "warning")

	// A metric the first reports lack: every running trial has reported
	// without it, so the experiment stops there (Ray stops at the first
	// such report), naming the metrics there are.
	fn := func(ctx context.Context, tr *Trial) error {
		for step := tr.Iteration(); step < 3; step++ {
			m := trainer.Metrics{"loss": 1.0}
			if step == 2 {
				m["val_loss"] = 2.0
			}
			if err := tr.Report(ctx, m, ""); err != nil {
				return err
			}
		}
		return nil
	}
	var progress bytes.Buffer
	g, err := New(&InProcess{Fn: fn}, map[string]any{}, Config{Name: "later", StoragePath: dir,
		Metric: "val_loss", Mode: ModeMin, Progress: &progress}).Fit(context.Background())
	var me *MetricError
	must.True(t, errors.As(err, &me), must.Sprint(err))
	must.Eq(t, []string{"loss"}, me.Reported)
	must.StrContains(t, progress.String(), `stopping: metric "val_loss" is not among the reported metrics (loss)`)
	must.EqOp(t, StatusStopped, g.Trials[0].Status)
	must.EqOp(t, 1, g.Trials[0].Iterations)
}

// A metric no trial reports stops the experiment once every running trial
// has reported, rather than after every trial ran to its end.
func TestMetricMissingStopsEarly(t *testing.T) {
	var reports atomic.Int64
	// Each trial reports once, then would train on only when stopped: the
	// experiment must end on the two running trials' first reports,
	// whatever the machine's speed (a trial that trained on at full speed
	// made the count depend on scheduling).
	fn := func(ctx context.Context, tr *Trial) error {
		reports.Add(1)
		if err := tr.Report(ctx, trainer.Metrics{"loss": 1.0, "acc": 0.5}, ""); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second): // not stopped: ends TERMINATED, and the test fails
			return nil
		}
	}
	g, err := New(&InProcess{Fn: fn}, map[string]any{"lr": Uniform(0, 1)}, Config{Name: "typo", StoragePath: t.TempDir(),
		NumSamples: 6, MaxConcurrentTrials: 2, Metric: "val_loss", Mode: ModeMin}).Fit(context.Background())
	var me *MetricError
	must.True(t, errors.As(err, &me), must.Sprint(err))
	must.Eq(t, []string{"acc", "loss"}, me.Reported)
	must.EqOp(t, 2, reports.Load()) // the two running trials, once each: not all six
	for _, tr := range g.Trials {
		must.NotEq(t, StatusTerminated, tr.Status)
	}
}

// fixedScheduler is a custom SchedulerSettings that builds one scheduler.
type fixedScheduler struct{ s Scheduler }

func (fixedScheduler) Kind() string                                 { return "fixed" }
func (f fixedScheduler) Build(Objective, uint64) (Scheduler, error) { return f.s, nil }

// An experiment whose state is gone finds its earlier trials' runs: it
// refuses to start afresh over them (its trial_0000 would resume the old
// one's checkpoint under another config, and retention would delete what
// it trained), and deletes nothing. Trial directories without records
// (made before a first state that never reached the disk) do not count.
func TestFreshExperimentRefusesEarlierTrials(t *testing.T) {
	dir := t.TempDir()
	fn := func(ctx context.Context, tr *Trial) error {
		for step := tr.Iteration(); step < 2; step++ {
			d, err := tr.NewCheckpointDir()
			if err != nil {
				return err
			}
			if err := tr.Report(ctx, trainer.Metrics{"loss": float64(step)}, d); err != nil {
				return err
			}
		}
		return nil
	}
	cfg := Config{Name: "gone", StoragePath: dir, Metric: "loss", Mode: ModeMin}
	space := map[string]any{"lr": GridSearch(0.1, 0.2)}
	g, err := New(&InProcess{Fn: fn}, space, cfg).Fit(context.Background())
	must.NoError(t, err)
	must.NoError(t, os.Remove(filepath.Join(g.Path, storage.ExperimentStateFile)))
	kept, err := filepath.Glob(filepath.Join(g.Path, "trial_*", "checkpoint_*"))
	must.NoError(t, err)
	must.SliceNotEmpty(t, kept)

	_, err = New(&InProcess{Fn: fn}, space, cfg).Fit(context.Background())
	must.ErrorIs(t, err, ErrEarlierTrials)
	must.ErrorContains(t, err, "trial_0000, trial_0001")
	after, err := filepath.Glob(filepath.Join(g.Path, "trial_*", "checkpoint_*"))
	must.NoError(t, err)
	must.Eq(t, kept, after, must.Sprint("nothing deleted"))

	// Directories a fresh start made, without records, are no trials.
	empty := t.TempDir()
	must.NoError(t, os.MkdirAll(filepath.Join(empty, "fresh", "trial_0000"), 0o755))
	cfg.Name, cfg.StoragePath = "fresh", empty
	_, err = New(&InProcess{Fn: fn}, space, cfg).Fit(context.Background())
	must.NoError(t, err)
}
