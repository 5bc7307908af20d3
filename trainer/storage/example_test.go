package storage_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

func check(err error) {
	if err != nil {
		panic(err)
	}
}

// A run keeps the best two checkpoints by loss, and always the latest.
func ExampleOpen() {
	root, err := os.MkdirTemp("", "results")
	check(err)
	defer os.RemoveAll(root)
	policy := storage.Policy{NumToKeep: 2, ScoreAttribute: "loss", ScoreOrder: storage.ScoreMin}

	run, err := storage.Open(root, "quickstart", policy)
	check(err)
	for step, loss := range []float64{0.9, 0.4, 0.6, 0.7} {
		staged, err := run.Stage()
		check(err)
		weights := fmt.Appendf(nil, "weights at step %d", step)
		check(os.WriteFile(filepath.Join(staged.Dir(), "model.bin"), weights, 0o644))
		_, err = run.Commit(staged, storage.Record{Step: int64(step), Metrics: map[string]any{"loss": loss}})
		check(err)
	}
	check(run.Close())

	// On resume: reopen and load the latest checkpoint.
	run, err = storage.Open(root, "quickstart", policy)
	check(err)
	defer run.Close()
	name, path, _, err := run.Latest()
	check(err)
	weights, err := os.ReadFile(filepath.Join(path, "model.bin"))
	check(err)
	fmt.Println(name, string(weights))
	best, err := run.Best(0)
	check(err)
	for _, rec := range best {
		fmt.Println(rec.Checkpoint, rec.Metrics["loss"])
	}
	// Output:
	// checkpoint_000003 weights at step 3
	// checkpoint_000001 0.4
	// checkpoint_000002 0.6
	// checkpoint_000003 0.7
}
