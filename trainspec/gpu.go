package trainspec

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
)

// GPUs. use_gpu asks Nomad for resources_per_worker.gpu devices of type
// "nvidia/gpu" for each worker, which Nomad schedules only on clients that
// run its NVIDIA device plugin (nomad-device-nvidia). The builtins compute
// on the CPU (the Go trainer/nn library), so a GPU reserved for one of them
// sits idle: that is worth a warning, not an error (the spec may be a
// placeholder for a command entrypoint).

// warnGPUOnBuiltin warns when the scaling block sets use_gpu = true for a
// builtin entrypoint.
func (d *decoder) warnGPUOnBuiltin(scaling *hcl.Block, s *Spec) {
	if !s.Scaling.UseGPU || s.Entrypoint.Builtin == "" {
		return
	}
	c, _, _ := scaling.Body.PartialContent(&hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "use_gpu"}}})
	rng := scaling.DefRange
	if attr := c.Attributes["use_gpu"]; attr != nil {
		rng = attr.Range
	}
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagWarning,
		Summary:  "GPUs reserved for a builtin that computes on the CPU",
		Detail: fmt.Sprintf("The builtin %q computes on the CPU, so the GPUs use_gpu reserves for each worker would sit idle. "+
			"Use a command entrypoint that uses them (a PyTorch script: see examples/gpu), or remove use_gpu.", s.Entrypoint.Builtin),
		Subject: rng.Ptr(),
	})
}
