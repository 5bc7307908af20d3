package driver

import (
	"path/filepath"
	"testing"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
)

// FuzzMountStorage: whatever destination and storage_path (or
// resume_from) a job gives, a path the driver rebases lies inside the
// mount's host path, and one it does not rebase is the job's own,
// unchanged.
func FuzzMountStorage(f *testing.F) {
	for _, seed := range [][2]string{
		{"/mnt/shared", "/mnt/shared/results"},
		{"/mnt/shared", "/mnt/shared/../../etc"},
		{"/mnt/shared/..", "/mnt/shared/x"},
		{"data", "data/r"},
		{"/", "/tmp/results"},
		{"/mnt/shared", "file:///mnt/shared/r"},
		{"/mnt/shared", "file:///mnt/shared/%2e%2e/%2e%2e/etc"},
		{"/mnt/shared", "s3://bucket/p"},
		{"/mnt/shared", "./results"},
	} {
		f.Add(seed[0], seed[1], false)
	}
	const taskDir, host = "/alloc/w", "/srv/volume"
	f.Fuzz(func(t *testing.T, dest, storagePath string, readOnly bool) {
		tc := &drivers.TaskConfig{Mounts: []*drivers.Mount{{TaskPath: dest, HostPath: host, Readonly: readOnly}}}
		mounts, err := taskMounts(tc, taskDir)
		if err != nil {
			return
		}
		from, err := mountStorage(TaskConfig{StoragePath: "s3://b/p", Checkpoint: CheckpointConfig{ResumeFrom: storagePath}}, mounts, taskDir)
		if got := from.Checkpoint.ResumeFrom; err == nil && got != storagePath {
			if rel, err := filepath.Rel(host, got); err != nil || !filepath.IsLocal(rel) {
				t.Fatalf("resume_from %q under destination %q was rebased to %q, outside the host path %s", storagePath, dest, got, host)
			}
		}
		cfg, err := mountStorage(TaskConfig{StoragePath: storagePath}, mounts, taskDir)
		if err != nil || cfg.StoragePath == storagePath {
			return
		}
		rel, err := filepath.Rel(host, cfg.StoragePath)
		if err != nil || !filepath.IsLocal(rel) {
			t.Fatalf("storage_path %q under destination %q was rebased to %q, outside the host path %s", storagePath, dest, cfg.StoragePath, host)
		}
		if readOnly {
			t.Fatalf("storage_path %q was rebased onto a read-only mount", storagePath)
		}
	})
}
