// Command quickstart trains the quick start model on 4 local worker
// processes with the Go API, the way Ray Train's quick start does:
//
//	go run ./examples/quickstart/cmd
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/nomad-train/nomad-train/examples/quickstart"
	"github.com/nomad-train/nomad-train/trainer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	t := trainer.New(quickstart.Train,
		trainer.Scaling{NumWorkers: 4},
		trainer.Run{Name: "quickstart-go", StoragePath: "./results",
			Checkpoint: trainer.CheckpointConfig{NumToKeep: 2, ScoreAttribute: "loss", ScoreOrder: "min"}},
		quickstart.DefaultConfig())
	result, err := t.Fit(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "training failed:", err)
		os.Exit(1)
	}
	fmt.Printf("final loss %.6f, checkpoint %s\n", result.Metrics["loss"], result.Checkpoint.Path())
}
