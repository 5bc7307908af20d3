package driver

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Mounts without filesystem isolation. The driver declares mount support,
// so Nomad passes a task's volume_mounts (host and CSI volumes) in
// TaskConfig.Mounts, but it has no chroot to mount them into: a worker
// finds a volume at its host path, not at its destination. So that a
// storage_path under a destination means what the job's author meant, the
// driver rebases it onto the mount's host path, and it tells the worker
// where every volume is (workerenv.Mounts).
//
// A host path is Nomad's (the client's host_volume, a CSI plugin's
// publish directory); the destination and storage_path are the job's.
// Neither may hold a ".." element, so the rebased path is always inside
// the mount's host path. The worker still runs as the task's user, so
// the volume's own permissions decide what it may read and write.

// ErrMountRefused is wrapped when StartTask refuses a task's mounts or a
// storage_path the mounts cannot serve.
var ErrMountRefused = errors.New("mount refused")

// taskMounts checks the task's mounts and says where the worker finds
// each. A relative destination is the task directory's (taskDir).
func taskMounts(tc *drivers.TaskConfig, taskDir string) ([]workerenv.Mount, error) {
	var out []workerenv.Mount
	for i, m := range tc.GetMounts() {
		dest, host := m.GetTaskPath(), m.GetHostPath()
		switch {
		case dest == "":
			return nil, fmt.Errorf("%w: mount %d has no destination", ErrMountRefused, i)
		case hasDotDot(dest):
			return nil, fmt.Errorf("%w: destination %q holds a \"..\" element; name the directory directly", ErrMountRefused, dest)
		case !filepath.IsAbs(host):
			return nil, fmt.Errorf("%w: mount at %q has host path %q, not an absolute path", ErrMountRefused, dest, host)
		}
		if !filepath.IsAbs(dest) {
			dest = filepath.Join(taskDir, dest)
		}
		dest = filepath.Clean(dest)
		if slices.ContainsFunc(out, func(o workerenv.Mount) bool { return o.Destination == dest }) {
			return nil, fmt.Errorf("%w: two mounts at %q", ErrMountRefused, dest)
		}
		out = append(out, workerenv.Mount{Destination: dest, HostPath: filepath.Clean(host), ReadOnly: m.GetReadonly()})
	}
	return out, nil
}

// mountStorage rebases cfg's storage path onto the host path of the mount
// that holds it, if one does, and likewise the checkpoint the run starts
// from (checkpoint.resume_from). A path on object storage is left as it
// is. Storage on a read-only mount is refused: checkpoints are written
// there. The checkpoint to start from is only read.
func mountStorage(cfg TaskConfig, mounts []workerenv.Mount, taskDir string) (TaskConfig, error) {
	if len(mounts) == 0 {
		return cfg, nil
	}
	host, m, ok, err := onMount(cfg.StoragePath, "storage_path", mounts, taskDir)
	switch {
	case err != nil:
		return cfg, err
	case ok && m.ReadOnly:
		return cfg, fmt.Errorf("%w: storage_path %q is on the read-only volume mounted at %s; checkpoints and progress are written there, so mount it read-write or move storage_path", ErrMountRefused, cfg.StoragePath, m.Destination)
	case ok:
		cfg.StoragePath = host
	}
	if from := cfg.Checkpoint.ResumeFrom; from != "" {
		if host, _, ok, err = onMount(from, "checkpoint.resume_from", mounts, taskDir); err != nil {
			return cfg, err
		} else if ok {
			cfg.Checkpoint.ResumeFrom = host
		}
	}
	return cfg, nil
}

// onMount finds the mount that holds the directory p (a path or a file://
// URI; field names it in errors) and returns p on the mount's host path.
// ok is false for a path outside every mount or on object storage.
func onMount(p, field string, mounts []workerenv.Mount, taskDir string) (host string, m workerenv.Mount, ok bool, err error) {
	dir, err := storage.LocalDir(p)
	switch {
	case errors.Is(err, storage.ErrUnsupportedScheme):
		return "", m, false, nil
	case err != nil:
		return "", m, false, fieldErr(field, "%v", err)
	case hasDotDot(p):
		return "", m, false, fmt.Errorf("%w: %s %q holds a \"..\" element; with volume mounts the driver rebases it onto a volume's host path, so name the directory inside the volume directly", ErrMountRefused, field, p)
	}
	m, rel, ok := workerenv.MountOf(mounts, storage.Rebase(dir, taskDir))
	if !ok {
		return "", m, false, nil
	}
	return filepath.Join(m.HostPath, rel), m, true, nil
}

// hasDotDot reports whether p (a path or a file:// URI, also once
// unescaped: file:///a/%2e%2e is /a/..) holds a ".." element.
func hasDotDot(p string) bool {
	if u, err := url.PathUnescape(p); err == nil && u != p && hasDotDot(u) {
		return true
	}
	return slices.Contains(strings.Split(filepath.ToSlash(p), "/"), "..")
}
