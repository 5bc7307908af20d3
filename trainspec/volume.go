package trainspec

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/nomad/api"
)

// Volume types (volume "name" { type = ... }).
const (
	VolumeHost = "host"
	VolumeCSI  = "csi"
)

// CSI access and attachment modes, as Nomad names them.
var (
	csiAccessModes = []string{"single-node-reader-only", "single-node-writer",
		"multi-node-reader-only", "multi-node-single-writer", "multi-node-multi-writer"}
	csiAttachmentModes = []string{"file-system", "block-device"}
)

// Volume is a train.hcl volume "name" {} block: a Nomad host or CSI
// volume the worker group claims, mounted into every worker task at
// Destination. It is how workers share a directory on a cluster that has
// one to share (an NFS export as a host volume, a CSI volume with a
// multi-node access mode): storage_path then names a directory under
// Destination.
type Volume struct {
	Name        string
	Type        string // VolumeHost or VolumeCSI
	Source      string
	Destination string
	ReadOnly    bool `json:",omitempty"`
	// AccessMode and AttachmentMode are a CSI volume's (required there).
	AccessMode     string `json:",omitempty"`
	AttachmentMode string `json:",omitempty"`
	// PerAlloc claims "<source>[<alloc index>]": one volume per worker.
	PerAlloc bool `json:",omitempty"`

	rng hcl.Range // the block's header, for Compile's warnings
}

var volumeSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "type", Required: true}, {Name: "source", Required: true}, {Name: "destination", Required: true},
		{Name: "read_only"}, {Name: "access_mode"}, {Name: "attachment_mode"}, {Name: "per_alloc"},
	},
}

// volumeName keeps a volume's label usable as the key of a group's
// volume map and the volume of a volume_mount.
var volumeName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// volumes decodes the train block's volume blocks, with Nomad's rules for
// volume requests checked here, at the line that breaks them.
func (d *decoder) volumes(blocks hcl.Blocks, numWorkers int) []Volume {
	var out []Volume
	seen := map[string]hcl.Range{}
	dests := map[string]hcl.Range{}
	for _, b := range blocks {
		v := Volume{Name: b.Labels[0], rng: b.DefRange}
		if !volumeName.MatchString(v.Name) {
			d.rangeErrorf(b.LabelRanges[0], "Invalid volume name",
				"A volume name is 1 to 63 letters, digits, dots, dashes or underscores, starting with a letter or digit; got %q.", v.Name)
		}
		if first, dup := seen[v.Name]; dup {
			d.rangeErrorf(b.LabelRanges[0], "Duplicate volume", "Volume %q is defined twice; the first is at %s.", v.Name, first)
		}
		seen[v.Name] = b.DefRange
		c := d.content(b.Body, volumeSchema)
		a := c.Attributes
		d.enum(a["type"], &v.Type, VolumeHost, VolumeCSI)
		d.nonEmpty(a["source"], &v.Source)
		if attr := a["destination"]; d.nonEmpty(attr, &v.Destination) {
			switch {
			case !path.IsAbs(v.Destination):
				d.errorf(attr, "Mount destination not absolute",
					"destination is where the volume appears in every worker, an absolute path such as \"/mnt/shared\"; got %q.", v.Destination)
			case path.Clean(v.Destination) == "/":
				d.errorf(attr, "Mount destination is the root", "A volume cannot be mounted over /.")
			default:
				v.Destination = path.Clean(v.Destination)
				if first, dup := dests[v.Destination]; dup {
					d.errorf(attr, "Two volumes at one destination", "Another volume is mounted at %s (%s).", v.Destination, first)
				}
				dests[v.Destination] = attr.Range
			}
		}
		d.boolean(a["read_only"], &v.ReadOnly)
		d.boolean(a["per_alloc"], &v.PerAlloc)
		access, attach := a["access_mode"], a["attachment_mode"]
		switch v.Type {
		case VolumeHost:
			for _, attr := range []*hcl.Attribute{access, attach, a["per_alloc"]} {
				if attr != nil {
					d.rangeErrorf(attr.NameRange, "Setting of a CSI volume", "%s applies to a volume of type \"csi\", not to a host volume.", attr.Name)
				}
			}
		case VolumeCSI:
			d.csiModes(b, &v, access, attach, numWorkers)
		}
		out = append(out, v)
	}
	return out
}

// csiModes decodes and checks a CSI volume's modes against its read_only
// setting and the number of workers that claim it, as Nomad does.
func (d *decoder) csiModes(b *hcl.Block, v *Volume, access, attach *hcl.Attribute, numWorkers int) {
	if access == nil || attach == nil {
		d.rangeErrorf(b.DefRange, "Missing CSI modes",
			"A CSI volume needs access_mode (one of %s) and attachment_mode (%s).", quoteList(csiAccessModes), quoteList(csiAttachmentModes))
	}
	d.enum(attach, &v.AttachmentMode, csiAttachmentModes...)
	if !d.enum(access, &v.AccessMode, csiAccessModes...) {
		return
	}
	shared := numWorkers > 1 && !v.PerAlloc
	switch {
	case slices.Contains([]string{"single-node-reader-only", "multi-node-reader-only"}, v.AccessMode) && !v.ReadOnly:
		d.errorf(access, "Read-only access mode", "A volume with access mode %q must be mounted with read_only = true.", v.AccessMode)
	case shared && (v.AccessMode == "single-node-reader-only" || v.AccessMode == "single-node-writer"):
		d.errorf(access, "Volume for one worker", "Access mode %q lets one allocation claim the volume, and %d workers would; use a multi-node mode, or per_alloc = true for one volume per worker.", v.AccessMode, numWorkers)
	case shared && v.AccessMode == "multi-node-single-writer" && !v.ReadOnly:
		d.errorf(access, "Volume for one writer", "Access mode %q allows one writer, and %d workers would write; use multi-node-multi-writer, read_only = true, or per_alloc = true.", v.AccessMode, numWorkers)
	}
}

// The train driver runs workers without filesystem isolation, so it
// honours a volume_mount in its own way: a storage_path (or the
// checkpoint's resume_from) under a volume's destination is rebased onto
// the volume's host path on each client, and every volume's host path is
// handed to the worker in NOMAD_TRAIN_MOUNTS. It refuses storage on a
// read-only volume, and either path with a ".." element when the task has
// volumes. Parse checks these first, and Compile warns about volumes that
// hold neither.

// storageVolume is the volume whose destination holds the storage path p
// (a local absolute path), the deepest when they nest, or nil.
func storageVolume(vols []Volume, p string) *Volume {
	if !path.IsAbs(p) {
		return nil
	}
	p = path.Clean(p)
	var found *Volume
	for i, v := range vols {
		inside := p == v.Destination || strings.HasPrefix(p, strings.TrimSuffix(v.Destination, "/")+"/")
		if inside && (found == nil || len(v.Destination) > len(found.Destination)) {
			found = &vols[i]
		}
	}
	return found
}

// storageOnVolumes checks the run's storage path against the volumes as
// the train driver will when it starts a worker.
func (d *decoder) storageOnVolumes(s *Spec) {
	p := s.Run.StoragePath
	if len(s.Volumes) == 0 || strings.Contains(p, "://") {
		return
	}
	rng := s.ranges.rangeOr(s.ranges.storage)
	if slices.Contains(strings.Split(p, "/"), "..") {
		d.diags = append(d.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Subject: rng,
			Summary: "Storage path with \"..\"",
			Detail:  fmt.Sprintf("With volumes, the train driver moves a storage_path under a volume's destination onto the volume's path on the client, and it refuses %q rather than guess whether it leaves the volume; name the directory directly.", p)})
		return
	}
	if v := storageVolume(s.Volumes, p); v != nil && v.ReadOnly {
		d.diags = append(d.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Subject: rng,
			Summary: "Storage on a read-only volume",
			Detail:  fmt.Sprintf("storage_path %q is on volume %q, mounted read-only at %s; checkpoints and progress are written there, so set read_only = false or move storage_path.", p, v.Name, v.Destination)})
	}
}

// resumeFromOnVolumes checks the checkpoint a run starts from against the
// volumes as the train driver will: it may be on a read-only one, since
// workers only read it, but a ".." is refused.
func (d *decoder) resumeFromOnVolumes(s *Spec) {
	p := s.Run.Checkpoint.ResumeFrom
	if len(s.Volumes) == 0 || p == "" || strings.Contains(p, "://") {
		return
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		d.diags = append(d.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Subject: s.ranges.rangeOr(s.ranges.resumeFrom),
			Summary: "resume_from with \"..\"",
			Detail:  fmt.Sprintf("With volumes, the train driver moves a resume_from under a volume's destination onto the volume's path on the client, and it refuses %q rather than guess whether it leaves the volume; name the checkpoint directly.", p)})
	}
}

// volumeWarnings warns about the volumes that hold neither storage nor the
// checkpoint to start from: a worker does not find them at destination but
// at the path NOMAD_TRAIN_MOUNTS gives.
func volumeWarnings(vols []Volume, storagePath, resumeFrom string) hcl.Diagnostics {
	var diags hcl.Diagnostics
	holder, from := storageVolume(vols, storagePath), storageVolume(vols, resumeFrom)
	for i, v := range vols {
		if holder == &vols[i] || from == &vols[i] {
			continue
		}
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagWarning, Subject: v.rng.Ptr(), Extra: NeedsAddress,
			Summary: "Volume seen at its host path",
			Detail: fmt.Sprintf("The train driver runs workers without filesystem isolation: it moves only storage_path and resume_from from under a destination onto the volume's path on the client. A worker finds volume %q not at %s but at the host_path NOMAD_TRAIN_MOUNTS gives for that destination (JSON; workerenv.HostPathOf in Go).",
				v.Name, v.Destination)})
	}
	return diags
}

// compileVolumes adds the spec's volumes to the worker group and their
// mounts to its task.
func compileVolumes(vols []Volume, g *api.TaskGroup, t *api.Task) {
	for _, v := range vols {
		if g.Volumes == nil {
			g.Volumes = map[string]*api.VolumeRequest{}
		}
		req := &api.VolumeRequest{Name: v.Name, Type: v.Type, Source: v.Source, ReadOnly: v.ReadOnly, PerAlloc: v.PerAlloc}
		if v.Type == VolumeCSI {
			req.AccessMode, req.AttachmentMode = v.AccessMode, v.AttachmentMode
		}
		g.Volumes[v.Name] = req
		t.VolumeMounts = append(t.VolumeMounts, &api.VolumeMount{
			Volume: new(v.Name), Destination: new(v.Destination), ReadOnly: new(v.ReadOnly),
		})
	}
}
