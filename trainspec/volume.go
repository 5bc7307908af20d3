package trainspec

import (
	"fmt"
	"path"
	"regexp"
	"slices"

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

// volumeWarnings says what the train driver makes of the spec's volumes
// today: it runs workers without filesystem isolation and takes no mounts
// (MountConfigs none), so a worker sees a host volume at the client's own
// path, not at destination, and Nomad refuses a CSI volume for its tasks
// ("no task supports CSI").
func volumeWarnings(vols []Volume) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, v := range vols {
		d := &hcl.Diagnostic{Severity: hcl.DiagWarning, Subject: v.rng.Ptr(), Extra: NeedsAddress}
		switch v.Type {
		case VolumeCSI:
			d.Summary = "CSI volume the train driver cannot mount"
			d.Detail = fmt.Sprintf("The train driver takes no mounts yet, so a Nomad client refuses to claim CSI volume %q for its tasks (\"no task supports CSI\"). Mount the filesystem on every client and offer it as a host volume instead.", v.Name)
		default:
			d.Summary = "Host volume seen at the client's path"
			d.Detail = fmt.Sprintf("The train driver runs workers without filesystem isolation: they see host volume %q at the path the client's host_volume block gives, not at %s. Give the host volume that path on every client (host_volume %q { path = %q }) so that storage_path means the same everywhere.", v.Name, v.Destination, v.Source, v.Destination)
		}
		diags = append(diags, d)
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
