package nn

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// File names SaveDir writes.
const (
	StateFile = "model.bin" // SaveState's output
	MetaFile  = "meta.json" // the caller's meta value as JSON
)

// SaveDir writes a model checkpoint into dir: m's and opt's state in
// StateFile and meta (e.g. the epoch) as JSON in MetaFile. The checkpoint
// layer that commits dir makes it durable.
func SaveDir(dir string, m *Sequential, opt Optimizer, meta any) error {
	f, err := os.Create(filepath.Join(dir, StateFile))
	if err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	if err := SaveState(f, m, opt); err != nil {
		f.Close()
		return fmt.Errorf("save model: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return fmt.Errorf("save model meta: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetaFile), b, 0o644); err != nil {
		return fmt.Errorf("save model meta: %w", err)
	}
	return nil
}

// LoadDir restores a checkpoint written by SaveDir into m and opt and
// decodes its meta into meta.
func LoadDir(dir string, m *Sequential, opt Optimizer, meta any) error {
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		return fmt.Errorf("load model meta: %w", err)
	}
	if err := json.Unmarshal(b, meta); err != nil {
		return fmt.Errorf("load model meta: %w", err)
	}
	f, err := os.Open(filepath.Join(dir, StateFile))
	if err != nil {
		return fmt.Errorf("load model: %w", err)
	}
	defer f.Close()
	return LoadState(f, m, opt)
}
