package trainspec

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// The scaling block: workers, their resources and devices.

var (
	scalingSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "num_workers"}, {Name: "use_gpu"}, {Name: "placement_strategy"}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "resources_per_worker"}, {Type: "trainer_resources"}},
	}
	workerResourcesSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "cpu"}, {Name: "cores"}, {Name: "memory"}, {Name: "gpu"}, {Name: "gpu_model"},
		},
		Blocks: []hcl.BlockHeaderSchema{{Type: "gpu_constraint"}, {Type: "gpu_affinity"}},
	}
	trainerResourcesSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "cpu"}, {Name: "cores"}, {Name: "memory"}},
	}
	deviceConstraintSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "attribute", Required: true}, {Name: "operator"}, {Name: "value"},
		},
	}
	deviceAffinitySchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "attribute", Required: true}, {Name: "operator"}, {Name: "value"}, {Name: "weight"},
		},
	}
)

func (d *decoder) scaling(b *hcl.Block, sc *Scaling, ranges *specRanges) {
	c := d.content(b.Body, scalingSchema)
	a := c.Attributes
	if attr := a["num_workers"]; attr != nil {
		d.numWorkers(attr, sc)
		ranges.numWorkers = attr.Range
	}
	d.boolean(a["use_gpu"], &sc.UseGPU)
	if attr := a["placement_strategy"]; attr != nil {
		d.enum(attr, &sc.PlacementStrategy, PlacementPack, PlacementSpread, PlacementStrictSpread)
	}
	if rb := d.single(c, "resources_per_worker"); rb != nil {
		d.workerResources(rb, sc)
	}
	if sc.UseGPU && sc.ResourcesPerWorker.GPU == 0 {
		sc.ResourcesPerWorker.GPU = 1
	}
	if tb := d.single(c, "trainer_resources"); tb != nil {
		r := Resources{}
		rc := d.content(tb.Body, trainerResourcesSchema)
		d.cpuMemory(rc, &r, DefaultTrainerCores, DefaultTrainerMemoryMB)
		sc.TrainerResources = &r
		ranges.trainerResources = tb.DefRange
	}
}

func (d *decoder) workerResources(b *hcl.Block, sc *Scaling) {
	r := &sc.ResourcesPerWorker
	c := d.content(b.Body, workerResourcesSchema)
	a := c.Attributes
	d.cpuMemory(c, r, DefaultWorkerCores, DefaultWorkerMemoryMB)

	// GPU settings: every one of them needs use_gpu.
	needGPU := func(rng hcl.Range, what string) {
		if !sc.UseGPU {
			d.rangeErrorf(rng, "GPU requested without use_gpu",
				"resources_per_worker sets %s, but scaling.use_gpu is not true. Set use_gpu = true in the scaling block.", what)
		}
	}
	if attr := a["gpu"]; attr != nil {
		if d.integer(attr, &r.GPU, 1, math.MaxInt32) {
			needGPU(attr.NameRange, "gpu")
		}
	}
	if attr := a["gpu_model"]; attr != nil {
		var model string
		if d.nonEmpty(attr, &model) {
			needGPU(attr.NameRange, "gpu_model")
			r.GPUConstraints = append(r.GPUConstraints, DeviceConstraint{Attribute: "${device.model}", Operator: "=", Value: model})
		}
	}
	for _, cb := range c.Blocks {
		affinity := cb.Type == "gpu_affinity"
		dc, ok := d.deviceConstraint(cb, affinity)
		if !ok {
			continue
		}
		needGPU(cb.DefRange, cb.Type)
		if affinity {
			r.GPUAffinities = append(r.GPUAffinities, dc)
		} else {
			r.GPUConstraints = append(r.GPUConstraints, dc)
		}
	}
}

// cpuMemory reads cpu, cores and memory, with defaults for unset ones.
func (d *decoder) cpuMemory(c *hcl.BodyContent, r *Resources, defCores, defMemoryMB int) {
	a := c.Attributes
	r.CPU, r.Cores, r.MemoryMB = 0, 0, defMemoryMB
	cpu, cores := a["cpu"], a["cores"]
	d.integer(cpu, &r.CPU, 1, math.MaxInt32)
	d.integer(cores, &r.Cores, 1, math.MaxInt32)
	switch {
	case cpu != nil && cores != nil:
		d.rangeErrorf(cores.NameRange, "Conflicting CPU settings", "Set either cpu (MHz) or cores (dedicated cores), not both: Nomad rejects a task with both.")
	case cpu == nil && cores == nil:
		r.Cores = defCores
	}
	if attr := a["memory"]; attr != nil {
		d.memory(attr, &r.MemoryMB)
	}
}

// memory reads a memory size: a number of MiB, or a string with a MiB or
// GiB unit such as "16 GiB".
func (d *decoder) memory(attr *hcl.Attribute, dst *int) {
	val, diags := attr.Expr.Value(d.ctx)
	d.diags = append(d.diags, diags...)
	if diags.HasErrors() || val.IsNull() || !val.IsWhollyKnown() {
		return
	}
	if val.Type() != cty.String {
		d.integer(attr, dst, 1, math.MaxInt32)
		return
	}
	mb, err := parseMemory(val.AsString())
	if err != nil {
		d.errorf(attr, "Invalid memory size", "%s; write a number of MiB or a string such as \"512 MiB\" or \"16 GiB\".", err)
		return
	}
	*dst = mb
}

var memoryPattern = regexp.MustCompile(`^\s*([0-9]+)\s*(MiB|MB|GiB|GB)?\s*$`)

func parseMemory(s string) (int, error) {
	m := memoryPattern.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not a memory size", s)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n > math.MaxInt32 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	switch m[2] {
	case "GiB", "GB": // Nomad's MB are MiB; GB is read the same way
		if n > math.MaxInt32/1024 {
			return 0, fmt.Errorf("%q is too large", s)
		}
		n *= 1024
	}
	if n < 1 {
		return 0, fmt.Errorf("%q is not positive", s)
	}
	return n, nil
}

// Device attribute names that are not under ${device.attr.*}.
var deviceTopLevel = []string{"ids", "model", "type", "vendor"}

var (
	deviceOperators   = []string{"=", "!=", ">", ">=", "<", "<=", "regexp", "version", "semver", "set_contains", "set_contains_all", "set_contains_any", "is_set", "is_not_set"}
	attributeNameExpr = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.-]*$`)
)

func (d *decoder) deviceConstraint(b *hcl.Block, affinity bool) (DeviceConstraint, bool) {
	schema := deviceConstraintSchema
	if affinity {
		schema = deviceAffinitySchema
	}
	c := d.content(b.Body, schema)
	a := c.Attributes
	dc := DeviceConstraint{Operator: "="}
	before := len(d.diags.Errs())
	if attr := a["attribute"]; d.nonEmpty(attr, &dc.Attribute) {
		switch {
		case strings.HasPrefix(dc.Attribute, "${"):
		case slices.Contains(deviceTopLevel, dc.Attribute):
			dc.Attribute = "${device." + dc.Attribute + "}"
		case attributeNameExpr.MatchString(dc.Attribute):
			dc.Attribute = "${device.attr." + dc.Attribute + "}"
		default:
			d.errorf(attr, "Invalid device attribute", "%q is not a device attribute name such as \"memory\" or \"model\".", dc.Attribute)
		}
	}
	d.enum(a["operator"], &dc.Operator, deviceOperators...)
	if attr := a["value"]; attr != nil {
		d.str(attr, &dc.Value)
	} else if dc.Operator != "is_set" && dc.Operator != "is_not_set" {
		d.rangeErrorf(b.DefRange, "Missing value", "A %s with operator %q needs a value.", b.Type, dc.Operator)
	}
	if affinity {
		dc.Weight = DefaultGPUAffinityWeight
		if attr := a["weight"]; d.integer(attr, &dc.Weight, -100, 100) && dc.Weight == 0 {
			d.errorf(attr, "Invalid value", "weight must be between -100 and 100 and not 0.")
		}
	}
	return dc, len(d.diags.Errs()) == before
}

// numWorkers decodes num_workers: a number, or [min, max] for an elastic
// gang (Ray's num_workers = (min, max)).
func (d *decoder) numWorkers(attr *hcl.Attribute, sc *Scaling) {
	val, diags := attr.Expr.Value(d.ctx)
	if diags.HasErrors() || val.IsNull() || !val.IsWhollyKnown() || !(val.Type().IsTupleType() || val.Type().IsListType()) {
		d.integer(attr, &sc.NumWorkers, 1, math.MaxInt32)
		return
	}
	const usage = "num_workers is a number, or [min, max] for an elastic gang (such as [2, 4])"
	if val.LengthInt() != 2 {
		d.errorf(attr, "Invalid value", "%s; got %d values.", usage, val.LengthInt())
		return
	}
	var n [2]int
	for i, name := range []string{"min", "max"} {
		v := val.Index(cty.NumberIntVal(int64(i)))
		if v.IsNull() || !v.IsKnown() || v.Type() != cty.Number {
			d.errorf(attr, "Invalid value", "%s; its %s is not a number.", usage, name)
			return
		}
		bf := v.AsBigFloat()
		if !bf.IsInt() || bf.Sign() < 1 || bf.Cmp(big.NewFloat(math.MaxInt32)) > 0 {
			d.errorf(attr, "Invalid value", "%s; its %s must be a whole number from 1 to %d, got %s.", usage, name, math.MaxInt32, bf.Text('g', 10))
			return
		}
		i64, _ := bf.Int64()
		n[i] = int(i64)
	}
	if n[0] > n[1] {
		d.errorf(attr, "Invalid value", "%s; min (%d) is above max (%d).", usage, n[0], n[1])
		return
	}
	sc.NumWorkers = n[1]
	if n[0] < n[1] {
		sc.MinWorkers = n[0]
	}
}
