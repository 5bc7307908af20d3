package tune

import (
	"bytes"
	"context"
	"io"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// ResultFiles are the files WriteFiles writes beside the experiment's
// state.
var ResultFiles = []string{"results.csv", "results.json"}

// WriteFiles writes results.csv and results.json beside the experiment's
// state: into its directory, or as objects on its object store.
func (g *ResultGrid) WriteFiles(ctx context.Context) error {
	for i, write := range []func(io.Writer) error{g.WriteCSV, g.WriteJSON} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			return err
		}
		if err := storage.WriteExperimentFile(ctx, g.Path, ResultFiles[i], b.Bytes(), g.opts...); err != nil {
			return err
		}
	}
	return nil
}
