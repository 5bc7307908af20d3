package tune_test

import (
	"context"
	"fmt"
	"os"

	"github.com/nomad-train/nomad-train/scheduler/tune"
	"github.com/nomad-train/nomad-train/trainer"
)

// A grid search of an in-process trainable whose loss is smallest at
// x = 3, one trial at a time, under the median stopping rule: x = 5 is
// stopped once its best loss is worse than the median of the others'
// running means.
func Example() {
	dir, _ := os.MkdirTemp("", "tune-example-")
	defer os.RemoveAll(dir)
	fn := func(ctx context.Context, t *tune.Trial) error {
		var cfg struct {
			X int `json:"x"`
		}
		if err := t.DecodeConfig(&cfg); err != nil {
			return err
		}
		for i := t.Iteration(); i < 5; i++ {
			loss := float64((cfg.X-3)*(cfg.X-3)) + 1/float64(i+1)
			if err := t.Report(ctx, trainer.Metrics{"loss": loss}, ""); err != nil {
				return err
			}
		}
		return nil
	}
	grid, err := tune.New(&tune.InProcess{Fn: fn},
		map[string]any{"x": tune.GridSearch(0, 1, 2, 3, 4, 5)},
		tune.Config{Name: "example", StoragePath: dir, Metric: "loss", Mode: tune.ModeMin,
			Scheduler: tune.MedianSettings{GracePeriod: 1, MinSamplesRequired: 2}},
	).Fit(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	best, _ := grid.Best("", "")
	fmt.Println("best x:", best.Config["x"], "after", best.Iterations, "iterations")
	for _, tr := range grid.Trials {
		fmt.Println(tr.ID, tr.Status, tr.Iterations)
	}
	// Output:
	// best x: 3 after 5 iterations
	// trial_0000 TERMINATED 5
	// trial_0001 TERMINATED 5
	// trial_0002 TERMINATED 5
	// trial_0003 TERMINATED 5
	// trial_0004 TERMINATED 5
	// trial_0005 STOPPED 2
}

// Stop criteria end each trial at its first report that meets any of
// them (Ray's stop): here at a loss of at most 0.3, or else at the fourth
// iteration.
func ExampleStopCriterion() {
	dir, _ := os.MkdirTemp("", "tune-stop-example-")
	defer os.RemoveAll(dir)
	fn := func(ctx context.Context, t *tune.Trial) error {
		var cfg struct {
			Rate float64 `json:"rate"`
		}
		if err := t.DecodeConfig(&cfg); err != nil {
			return err
		}
		loss := 1.0
		for i := t.Iteration(); i < 100; i++ {
			loss *= cfg.Rate
			if err := t.Report(ctx, trainer.Metrics{"loss": loss}, ""); err != nil {
				return err
			}
		}
		return nil
	}
	grid, err := tune.New(&tune.InProcess{Fn: fn},
		map[string]any{"rate": tune.GridSearch(0.5, 0.9)},
		tune.Config{Name: "stop", StoragePath: dir, Metric: "loss", Mode: tune.ModeMin,
			Stop: []tune.StopCriterion{{Metric: "loss", Value: 0.3, AtMost: true}, {Metric: tune.TrainingIteration, Value: 4}}},
	).Fit(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, tr := range grid.Trials {
		fmt.Println(tr.ID, tr.Status, tr.Iterations, tr.Reason)
	}
	// Output:
	// trial_0000 TERMINATED 2 reached stop loss <= 0.3
	// trial_0001 TERMINATED 4 reached stop training_iteration >= 4
}
