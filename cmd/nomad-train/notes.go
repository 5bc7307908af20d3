package main

import (
	"context"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainspec"
)

// readNote reads the note name of the spec's run through storage (a
// directory or S3), or nil when there is none or it cannot be read: notes
// only feed hints.
func readNote(ctx context.Context, spec *trainspec.Spec, name string) []byte {
	b, err := storage.ReadNote(ctx, spec.Run.StoragePath, spec.Name, name,
		storage.WithStorageOptions(spec.Run.Storage.Options()))
	if err != nil {
		return nil
	}
	return b
}

// writeNote stores the note name of the spec's run, best effort.
func writeNote(ctx context.Context, spec *trainspec.Spec, name string, b []byte) {
	_ = storage.WriteNote(ctx, spec.Run.StoragePath, spec.Name, name, b,
		storage.WithStorageOptions(spec.Run.Storage.Options()))
}
