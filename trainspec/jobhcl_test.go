package trainspec

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/nomad/api"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/gocty"
)

// decodeJobHCL is a test-only decoder for the subset of Nomad's jobspec that
// RenderHCL writes. It evaluates every expression with hcl/v2 and fails on
// any attribute or block it does not consume, so a field RenderHCL adds
// without a counterpart here (or writes wrongly) breaks the round trip.
func decodeJobHCL(src []byte, filename string) (*api.Job, error) {
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diags
	}
	root := newNode(file.Body.(*hclsyntax.Body), nil)
	jobs := root.blocks("job")
	if len(jobs) != 1 {
		return nil, fmt.Errorf("want one job block, got %d", len(jobs))
	}
	jn := jobs[0]
	job := &api.Job{ID: new(jn.label(0)), Name: new(jn.label(0))}
	job.Type = jn.strPtr("type")
	job.Region = jn.strPtr("region")
	job.Namespace = jn.strPtr("namespace")
	job.Datacenters = jn.strList("datacenters")
	job.NodePool = jn.strPtr("node_pool")
	job.Priority = jn.intPtr("priority")
	job.Meta = jn.strMap("meta")
	job.Constraints = constraints(jn)
	for _, gn := range jn.blocks("group") {
		job.TaskGroups = append(job.TaskGroups, decodeGroup(gn))
	}
	if err := root.finish(); err != nil {
		return nil, err
	}
	return job, nil
}

func decodeGroup(n *node) *api.TaskGroup {
	g := &api.TaskGroup{Name: new(n.label(0)), Count: n.intPtr("count"), ShutdownDelay: n.durationPtr("shutdown_delay")}
	g.Constraints = constraints(n)
	for _, vn := range n.blocks("volume") {
		if g.Volumes == nil {
			g.Volumes = map[string]*api.VolumeRequest{}
		}
		v := &api.VolumeRequest{Name: vn.label(0), Type: vn.str("type"), Source: vn.str("source"),
			AccessMode: vn.str("access_mode"), AttachmentMode: vn.str("attachment_mode")}
		if ro := vn.boolPtr("read_only"); ro != nil {
			v.ReadOnly = *ro
		}
		if pa := vn.boolPtr("per_alloc"); pa != nil {
			v.PerAlloc = *pa
		}
		g.Volumes[v.Name] = v
	}
	for _, nn := range n.blocks("network") {
		net := &api.NetworkResource{}
		if m := nn.strPtr("mode"); m != nil {
			net.Mode = *m
		}
		for _, pn := range nn.blocks("port") {
			net.DynamicPorts = append(net.DynamicPorts, api.Port{Label: pn.label(0)})
		}
		g.Networks = append(g.Networks, net)
	}
	for _, sn := range n.blocks("service") {
		s := &api.Service{Name: sn.str("name"), PortLabel: sn.str("port"), Provider: sn.str("provider"), Tags: sn.strList("tags")}
		for _, cn := range sn.blocks("check") {
			s.Checks = append(s.Checks, api.ServiceCheck{
				Name: cn.str("name"), Type: cn.str("type"), Path: cn.str("path"), PortLabel: cn.str("port"),
				Interval: *cn.durationPtr("interval"), Timeout: *cn.durationPtr("timeout"),
			})
		}
		g.Services = append(g.Services, s)
	}
	for _, rn := range n.blocks("restart") {
		g.RestartPolicy = &api.RestartPolicy{
			Attempts: rn.intPtr("attempts"), Interval: rn.durationPtr("interval"),
			Delay: rn.durationPtr("delay"), Mode: rn.strPtr("mode"),
		}
	}
	for _, rn := range n.blocks("reschedule") {
		g.ReschedulePolicy = &api.ReschedulePolicy{
			Attempts: rn.intPtr("attempts"), Interval: rn.durationPtr("interval"),
			Delay: rn.durationPtr("delay"), DelayFunction: rn.strPtr("delay_function"),
			MaxDelay: rn.durationPtr("max_delay"), Unlimited: rn.boolPtr("unlimited"),
		}
	}
	for _, sn := range n.blocks("spread") {
		s := &api.Spread{Attribute: sn.str("attribute")}
		if w := sn.intPtr("weight"); w != nil {
			s.Weight = new(int8(*w))
		}
		g.Spreads = append(g.Spreads, s)
	}
	for _, tn := range n.blocks("task") {
		g.Tasks = append(g.Tasks, decodeTask(tn))
	}
	return g
}

func decodeTask(n *node) *api.Task {
	t := &api.Task{Name: n.label(0), Driver: n.str("driver"), KillSignal: n.str("kill_signal"), KillTimeout: n.durationPtr("kill_timeout")}
	for _, cn := range n.blocks("config") {
		t.Config = cn.generic()
	}
	t.Env = n.strMap("env")
	for _, an := range n.blocks("artifact") {
		t.Artifacts = append(t.Artifacts, &api.TaskArtifact{
			GetterSource: an.strPtr("source"), RelativeDest: an.strPtr("destination"),
			GetterMode: an.strPtr("mode"), GetterOptions: an.strMap("options"),
		})
	}
	for _, tn := range n.blocks("template") {
		t.Templates = append(t.Templates, &api.Template{
			EmbeddedTmpl: tn.strPtr("data"), DestPath: tn.strPtr("destination"),
			ChangeMode: tn.strPtr("change_mode"), Perms: tn.strPtr("perms"), Envvars: tn.boolPtr("env"),
		})
	}
	for _, mn := range n.blocks("volume_mount") {
		t.VolumeMounts = append(t.VolumeMounts, &api.VolumeMount{
			Volume: mn.strPtr("volume"), Destination: mn.strPtr("destination"), ReadOnly: mn.boolPtr("read_only"),
		})
	}
	for _, rn := range n.blocks("resources") {
		r := &api.Resources{CPU: rn.intPtr("cpu"), Cores: rn.intPtr("cores"), MemoryMB: rn.intPtr("memory")}
		for _, dn := range rn.blocks("device") {
			d := &api.RequestedDevice{Name: dn.label(0)}
			if c := dn.intPtr("count"); c != nil {
				d.Count = new(uint64(*c))
			}
			d.Constraints = constraints(dn)
			for _, an := range dn.blocks("affinity") {
				a := &api.Affinity{LTarget: an.str("attribute"), Operand: an.str("operator"), RTarget: an.str("value")}
				if w := an.intPtr("weight"); w != nil {
					a.Weight = new(int8(*w))
				}
				d.Affinities = append(d.Affinities, a)
			}
			r.Devices = append(r.Devices, d)
		}
		t.Resources = r
	}
	return t
}

func constraints(n *node) []*api.Constraint {
	var out []*api.Constraint
	for _, cn := range n.blocks("constraint") {
		out = append(out, &api.Constraint{LTarget: cn.str("attribute"), Operand: cn.str("operator"), RTarget: cn.str("value")})
	}
	return out
}

// node is one block (or the file) being decoded; it remembers which
// attributes and blocks were read.
type node struct {
	body     *hclsyntax.Body
	labels   []string
	used     map[string]bool
	children []*node
	errs     []error
}

func newNode(body *hclsyntax.Body, labels []string) *node {
	return &node{body: body, labels: labels, used: map[string]bool{}}
}

func (n *node) label(i int) string {
	if i >= len(n.labels) {
		n.errs = append(n.errs, fmt.Errorf("missing label %d", i))
		return ""
	}
	return n.labels[i]
}

func (n *node) blocks(typ string) []*node {
	n.used["block:"+typ] = true
	var out []*node
	for _, b := range n.body.Blocks {
		if b.Type == typ {
			c := newNode(b.Body, b.Labels)
			n.children = append(n.children, c)
			out = append(out, c)
		}
	}
	return out
}

// value evaluates attribute name with no variables; ok is false when absent.
func (n *node) value(name string) (cty.Value, bool) {
	n.used["attr:"+name] = true
	a, ok := n.body.Attributes[name]
	if !ok {
		return cty.NilVal, false
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() {
		n.errs = append(n.errs, diags)
		return cty.NilVal, false
	}
	return v, true
}

func (n *node) into(name string, dst any) bool {
	v, ok := n.value(name)
	if !ok {
		return false
	}
	ty, err := gocty.ImpliedType(dst)
	if err == nil {
		v, err = convert.Convert(v, ty)
	}
	if err == nil {
		err = gocty.FromCtyValue(v, dst)
	}
	if err != nil {
		n.errs = append(n.errs, fmt.Errorf("%s: %w", name, err))
		return false
	}
	return true
}

func (n *node) str(name string) string {
	var s string
	n.into(name, &s)
	return s
}

func (n *node) strPtr(name string) *string {
	var s string
	if !n.into(name, &s) {
		return nil
	}
	return &s
}

func (n *node) intPtr(name string) *int {
	var i int
	if !n.into(name, &i) {
		return nil
	}
	return &i
}

func (n *node) boolPtr(name string) *bool {
	var b bool
	if !n.into(name, &b) {
		return nil
	}
	return &b
}

func (n *node) durationPtr(name string) *time.Duration {
	var s string
	if !n.into(name, &s) {
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		n.errs = append(n.errs, err)
		return nil
	}
	return &d
}

func (n *node) strList(name string) []string {
	var l []string
	n.into(name, &l)
	return l
}

// strMap reads a map written either as a block (meta { k = "v" }) or as an
// attribute (meta = { k = "v" }).
func (n *node) strMap(name string) map[string]string {
	var m map[string]string
	if n.into(name, &m) {
		return m
	}
	for _, bn := range n.blocks(name) {
		m = map[string]string{}
		for k := range bn.body.Attributes {
			m[k] = bn.str(k)
		}
	}
	return m
}

// generic reads a driver config body: attributes become strings, ints,
// bools or string lists; blocks become lists of maps.
func (n *node) generic() map[string]any {
	out := map[string]any{}
	names := make([]string, 0, len(n.body.Attributes))
	for k := range n.body.Attributes {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v, ok := n.value(k)
		if !ok {
			continue
		}
		switch {
		case v.Type() == cty.String:
			out[k] = v.AsString()
		case v.Type() == cty.Bool:
			out[k] = v.True()
		case v.Type() == cty.Number:
			var i int
			if err := gocty.FromCtyValue(v, &i); err != nil {
				n.errs = append(n.errs, err)
			}
			out[k] = i
		default:
			var l []string
			lv, err := convert.Convert(v, cty.List(cty.String))
			if err == nil {
				err = gocty.FromCtyValue(lv, &l)
			}
			if err != nil {
				n.errs = append(n.errs, err)
			}
			out[k] = l
		}
	}
	for _, b := range n.body.Blocks {
		for _, c := range n.blocks(b.Type) {
			list, _ := out[b.Type].([]map[string]any)
			out[b.Type] = append(list, c.generic())
		}
	}
	return out
}

// finish reports errors and anything in the tree that was not read.
func (n *node) finish() error {
	errs := append([]error(nil), n.errs...)
	for name, a := range n.body.Attributes {
		if !n.used["attr:"+name] {
			errs = append(errs, fmt.Errorf("%s: attribute %q not decoded", a.SrcRange, name))
		}
	}
	for _, b := range n.body.Blocks {
		if !n.used["block:"+b.Type] {
			errs = append(errs, fmt.Errorf("%s: block %q not decoded", b.DefRange(), b.Type))
		}
	}
	for _, c := range n.children {
		if err := c.finish(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
