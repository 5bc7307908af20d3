package workerenv

import (
	"encoding/json"
	"fmt"
	"path/filepath"
)

// Mounts is the JSON list of the volumes mounted into a worker's task (see
// Mount), set by the Nomad task driver when the task has any. The driver
// runs workers without filesystem isolation, so a volume is not at its
// destination but at its host path: this says where.
const Mounts = "NOMAD_TRAIN_MOUNTS"

// Mount is one entry of Mounts: a volume the job mounts at Destination
// (its volume_mount) and where the worker finds it, HostPath. ReadOnly
// says the job asked for it read-only; nothing enforces that but the
// permissions of HostPath.
type Mount struct {
	Destination string `json:"destination"`
	HostPath    string `json:"host_path"`
	ReadOnly    bool   `json:"read_only,omitempty"`
}

// EncodeMounts is the value of Mounts for ms ("" for none).
func EncodeMounts(ms []Mount) string {
	if len(ms) == 0 {
		return ""
	}
	b, _ := json.Marshal(ms) // a slice of plain structs always encodes
	return string(b)
}

// DecodeMounts reads a value of Mounts; "" (or an empty list) is no
// mounts, nil.
func DecodeMounts(v string) ([]Mount, error) {
	if v == "" {
		return nil, nil
	}
	var ms []Mount
	if err := json.Unmarshal([]byte(v), &ms); err != nil {
		return nil, fmt.Errorf("decode %s: %w", Mounts, err)
	}
	if len(ms) == 0 {
		return nil, nil
	}
	return ms, nil
}

// HostPathOf is where a worker finds p, a path as the job names it (under
// a volume's destination): p itself when no mount holds it.
func HostPathOf(ms []Mount, p string) string {
	if m, rel, ok := MountOf(ms, p); ok {
		return filepath.Join(m.HostPath, rel)
	}
	return filepath.Clean(p)
}

// MountOf is the mount that holds p, the one with the longest destination
// when they nest, and p's path inside it (lexically: p is cleaned first,
// so "/mnt/shared/../etc" is not in a mount at /mnt/shared).
func MountOf(ms []Mount, p string) (Mount, string, bool) {
	p = filepath.Clean(p)
	var (
		found   Mount
		foundIn string
		best    = -1
	)
	for _, m := range ms {
		dest := filepath.Clean(m.Destination)
		rel, err := filepath.Rel(dest, p)
		if err != nil || !filepath.IsLocal(rel) || len(dest) <= best {
			continue
		}
		found, foundIn, best = m, rel, len(dest)
	}
	return found, foundIn, best >= 0
}
