package trainspec

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/hashicorp/nomad/api"
	"github.com/zclconf/go-cty/cty"
)

// RenderJSON writes job as the JSON `nomad job run -json` and the HTTP API
// accept: {"Job": {...}}, indented, with map keys sorted.
func RenderJSON(job *api.Job) ([]byte, error) {
	b, err := json.MarshalIndent(struct{ Job *api.Job }{job}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode job as json: %w", err)
	}
	return append(b, '\n'), nil
}

// RenderHCL writes job as a Nomad HCL2 jobspec in canonical formatting. It
// renders the fields Compile sets; other fields of api.Job are not written.
func RenderHCL(job *api.Job) []byte {
	f := hclwrite.NewEmptyFile()
	body := f.Body()
	jb := body.AppendNewBlock("job", []string{deref(job.ID)}).Body()
	setString(jb, "type", job.Type)
	setString(jb, "region", job.Region)
	setString(jb, "namespace", job.Namespace)
	if job.Datacenters != nil {
		jb.SetAttributeValue("datacenters", stringList(job.Datacenters))
	}
	setString(jb, "node_pool", job.NodePool)
	setInt(jb, "priority", job.Priority)
	writeStringMap(jb, "meta", job.Meta)
	writeConstraints(jb, job.Constraints)
	for _, g := range job.TaskGroups {
		writeGroup(jb, g)
	}
	return hclwrite.Format(f.Bytes())
}

// spaced returns b after a blank line when b already has content, so that
// the blocks of a job, group or task stand apart.
func spaced(b *hclwrite.Body) *hclwrite.Body {
	if len(b.Attributes()) > 0 || len(b.Blocks()) > 0 {
		b.AppendNewline()
	}
	return b
}

func writeGroup(parent *hclwrite.Body, g *api.TaskGroup) {
	b := spaced(parent).AppendNewBlock("group", []string{deref(g.Name)}).Body()
	setInt(b, "count", g.Count)
	setDuration(b, "shutdown_delay", g.ShutdownDelay)
	if len(g.Constraints) > 0 {
		writeConstraints(spaced(b), g.Constraints)
	}
	writeVolumes(b, g.Volumes)
	for _, n := range g.Networks {
		nb := spaced(b).AppendNewBlock("network", nil).Body()
		if n.Mode != "" {
			nb.SetAttributeValue("mode", cty.StringVal(n.Mode))
		}
		for _, p := range n.DynamicPorts {
			nb.AppendNewBlock("port", []string{p.Label})
		}
	}
	for _, s := range g.Services {
		writeService(b, s)
	}
	if r := g.RestartPolicy; r != nil {
		rb := spaced(b).AppendNewBlock("restart", nil).Body()
		setInt(rb, "attempts", r.Attempts)
		setDuration(rb, "interval", r.Interval)
		setDuration(rb, "delay", r.Delay)
		setString(rb, "mode", r.Mode)
	}
	if r := g.ReschedulePolicy; r != nil {
		rb := spaced(b).AppendNewBlock("reschedule", nil).Body()
		setInt(rb, "attempts", r.Attempts)
		setDuration(rb, "interval", r.Interval)
		setDuration(rb, "delay", r.Delay)
		setString(rb, "delay_function", r.DelayFunction)
		setDuration(rb, "max_delay", r.MaxDelay)
		if r.Unlimited != nil {
			rb.SetAttributeValue("unlimited", cty.BoolVal(*r.Unlimited))
		}
	}
	for _, s := range g.Spreads {
		sb := spaced(b).AppendNewBlock("spread", nil).Body()
		sb.SetAttributeValue("attribute", cty.StringVal(s.Attribute))
		if s.Weight != nil {
			sb.SetAttributeValue("weight", cty.NumberIntVal(int64(*s.Weight)))
		}
	}
	for _, t := range g.Tasks {
		writeTask(b, t)
	}
}

func writeService(parent *hclwrite.Body, s *api.Service) {
	b := spaced(parent).AppendNewBlock("service", nil).Body()
	b.SetAttributeValue("name", cty.StringVal(s.Name))
	b.SetAttributeValue("port", cty.StringVal(s.PortLabel))
	if s.Provider != "" {
		b.SetAttributeValue("provider", cty.StringVal(s.Provider))
	}
	if s.Tags != nil {
		b.SetAttributeValue("tags", stringList(s.Tags))
	}
	for _, c := range s.Checks {
		cb := b.AppendNewBlock("check", nil).Body()
		cb.SetAttributeValue("name", cty.StringVal(c.Name))
		cb.SetAttributeValue("type", cty.StringVal(c.Type))
		if c.Path != "" {
			cb.SetAttributeValue("path", cty.StringVal(c.Path))
		}
		cb.SetAttributeValue("port", cty.StringVal(c.PortLabel))
		cb.SetAttributeValue("interval", cty.StringVal(FormatDuration(c.Interval)))
		cb.SetAttributeValue("timeout", cty.StringVal(FormatDuration(c.Timeout)))
	}
}

func writeTask(parent *hclwrite.Body, t *api.Task) {
	b := spaced(parent).AppendNewBlock("task", []string{t.Name}).Body()
	b.SetAttributeValue("driver", cty.StringVal(t.Driver))
	if t.KillSignal != "" {
		b.SetAttributeValue("kill_signal", cty.StringVal(t.KillSignal))
	}
	if t.KillTimeout != nil {
		b.SetAttributeValue("kill_timeout", cty.StringVal(FormatDuration(*t.KillTimeout)))
	}
	if t.Config != nil {
		writeConfig(spaced(b).AppendNewBlock("config", nil).Body(), t.Config)
	}
	writeStringMap(b, "env", t.Env)
	for _, a := range t.Artifacts {
		ab := spaced(b).AppendNewBlock("artifact", nil).Body()
		setString(ab, "source", a.GetterSource)
		setString(ab, "destination", a.RelativeDest)
		setString(ab, "mode", a.GetterMode)
		writeStringMap(ab, "options", a.GetterOptions)
	}
	for _, tp := range t.Templates {
		tb := spaced(b).AppendNewBlock("template", nil).Body()
		setString(tb, "data", tp.EmbeddedTmpl)
		setString(tb, "destination", tp.DestPath)
		setString(tb, "change_mode", tp.ChangeMode)
		setString(tb, "perms", tp.Perms)
		if tp.Envvars != nil && *tp.Envvars {
			tb.SetAttributeValue("env", cty.True)
		}
	}
	for _, m := range t.VolumeMounts {
		mb := spaced(b).AppendNewBlock("volume_mount", nil).Body()
		setString(mb, "volume", m.Volume)
		setString(mb, "destination", m.Destination)
		if m.ReadOnly != nil {
			mb.SetAttributeValue("read_only", cty.BoolVal(*m.ReadOnly))
		}
	}
	if r := t.Resources; r != nil {
		rb := spaced(b).AppendNewBlock("resources", nil).Body()
		setInt(rb, "cpu", r.CPU)
		setInt(rb, "cores", r.Cores)
		setInt(rb, "memory", r.MemoryMB)
		for _, d := range r.Devices {
			db := rb.AppendNewBlock("device", []string{d.Name}).Body()
			if d.Count != nil {
				db.SetAttributeValue("count", cty.NumberUIntVal(*d.Count))
			}
			writeConstraints(db, d.Constraints)
			for _, a := range d.Affinities {
				ab := db.AppendNewBlock("affinity", nil).Body()
				writeTargets(ab, a.LTarget, a.Operand, a.RTarget)
				if a.Weight != nil {
					ab.SetAttributeValue("weight", cty.NumberIntVal(int64(*a.Weight)))
				}
			}
		}
	}
}

// writeConfig writes a driver config map: scalars and lists as attributes
// (sorted), then lists of maps as repeated blocks (sorted by name).
func writeConfig(b *hclwrite.Body, cfg map[string]any) {
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch v := cfg[k].(type) {
		case string:
			b.SetAttributeValue(k, cty.StringVal(v))
		case int:
			b.SetAttributeValue(k, cty.NumberIntVal(int64(v)))
		case bool:
			b.SetAttributeValue(k, cty.BoolVal(v))
		case []string:
			b.SetAttributeValue(k, stringList(v))
		}
	}
	for _, k := range keys {
		if blocks, ok := cfg[k].([]map[string]any); ok {
			for _, m := range blocks {
				writeConfig(b.AppendNewBlock(k, nil).Body(), m)
			}
		}
	}
}

func writeConstraints(b *hclwrite.Body, cs []*api.Constraint) {
	for _, c := range cs {
		writeTargets(b.AppendNewBlock("constraint", nil).Body(), c.LTarget, c.Operand, c.RTarget)
	}
}

func writeTargets(b *hclwrite.Body, l, op, r string) {
	if l != "" {
		b.SetAttributeValue("attribute", cty.StringVal(l))
	}
	if op != "" {
		b.SetAttributeValue("operator", cty.StringVal(op))
	}
	if r != "" {
		b.SetAttributeValue("value", cty.StringVal(r))
	}
}

// writeStringMap writes m as a block (meta { k = "v" }) when every key is an
// identifier, and otherwise as an attribute (meta = { "a.b" = "v" }); Nomad
// reads both.
func writeStringMap(b *hclwrite.Body, name string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	keys := make([]string, 0, len(m))
	idents := true
	for k := range m {
		keys = append(keys, k)
		idents = idents && hclsyntax.ValidIdentifier(k)
	}
	sort.Strings(keys)
	if !idents {
		vals := make(map[string]cty.Value, len(m))
		for k, v := range m {
			vals[k] = cty.StringVal(v)
		}
		b.SetAttributeValue(name, cty.MapVal(vals))
		return
	}
	mb := spaced(b).AppendNewBlock(name, nil).Body()
	for _, k := range keys {
		mb.SetAttributeValue(k, cty.StringVal(m[k]))
	}
}

func setString(b *hclwrite.Body, name string, v *string) {
	if v != nil && *v != "" {
		b.SetAttributeValue(name, cty.StringVal(*v))
	}
}

func setInt(b *hclwrite.Body, name string, v *int) {
	if v != nil {
		b.SetAttributeValue(name, cty.NumberIntVal(int64(*v)))
	}
}

func setDuration(b *hclwrite.Body, name string, v *time.Duration) {
	if v != nil {
		b.SetAttributeValue(name, cty.StringVal(FormatDuration(*v)))
	}
}

func stringList(items []string) cty.Value {
	if len(items) == 0 {
		return cty.ListValEmpty(cty.String)
	}
	vals := make([]cty.Value, len(items))
	for i, s := range items {
		vals[i] = cty.StringVal(s)
	}
	return cty.ListVal(vals)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Format returns src in canonical HCL formatting. Source that does not
// parse is returned unchanged, with the parse errors.
func Format(src []byte, filename string) ([]byte, hcl.Diagnostics) {
	_, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return src, diags
	}
	return hclwrite.Format(src), nil
}

// writeVolumes writes a group's volume requests, sorted by name.
func writeVolumes(parent *hclwrite.Body, vols map[string]*api.VolumeRequest) {
	for _, name := range slices.Sorted(maps.Keys(vols)) {
		v := vols[name]
		b := spaced(parent).AppendNewBlock("volume", []string{name}).Body()
		b.SetAttributeValue("type", cty.StringVal(v.Type))
		b.SetAttributeValue("source", cty.StringVal(v.Source))
		b.SetAttributeValue("read_only", cty.BoolVal(v.ReadOnly))
		if v.AccessMode != "" {
			b.SetAttributeValue("access_mode", cty.StringVal(v.AccessMode))
		}
		if v.AttachmentMode != "" {
			b.SetAttributeValue("attachment_mode", cty.StringVal(v.AttachmentMode))
		}
		if v.PerAlloc {
			b.SetAttributeValue("per_alloc", cty.True)
		}
	}
}
