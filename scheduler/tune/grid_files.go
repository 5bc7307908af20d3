package tune

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// WriteFiles writes results.csv and results.json into the experiment
// directory.
func (g *ResultGrid) WriteFiles() error {
	for name, write := range map[string]func(io.Writer) error{"results.csv": g.WriteCSV, "results.json": g.WriteJSON} {
		f, err := os.Create(filepath.Join(g.Path, name))
		if err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		err = write(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}
