package console_test

import (
	"fmt"
	"time"

	"github.com/nomad-train/nomad-train/scheduler/console"
)

// A run's progress, as the bar shows it on a terminal 80 columns wide.
func ExampleProgress_Bar() {
	p := console.Progress{Unit: "epoch", Done: 12, Total: 20, Rate: 2.5, Elapsed: 5 * time.Second, Metric: "loss=0.0135"}
	fmt.Println(p.Bar(80))
	// Output:
	// epoch 12/20 [==========>       ]  60%  0:05  2.50 epoch/s  ETA 0:03  loss=0.0135
}

// The summary run prints when it ends.
func ExampleSummary_Render() {
	fmt.Print(console.Summary{Kind: "run", Name: "quickstart", Wall: 8 * time.Second, Steps: 20,
		MaxFailures: 2, Best: "results/quickstart/checkpoint_000019", Score: "loss=0.0103",
		Storage: "./results"}.Render())
	// Output:
	// ==> summary of run "quickstart"
	//     wall time        8s
	//     steps            20 (2.50/s)
	//     restarts         0 (failures used: 0 of 2)
	//     best checkpoint  results/quickstart/checkpoint_000019 (loss=0.0103)
	//     curves           nomad-train dashboard ./results, then http://127.0.0.1:8265/#/run?key=quickstart
}
