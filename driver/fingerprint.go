package driver

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/driver/proto/structs"
)

// NVML is the part of go-nvml the driver uses. nvml.New() satisfies it in
// production; tests pass go-nvml's mock (mock.Interface, or a simulated
// machine such as dgxh100.New()).
type NVML interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	SystemGetDriverVersion() (string, nvml.Return)
	SystemGetCudaDriverVersion() (int, nvml.Return)
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
	DeviceGetHandleByUUID(string) (nvml.Device, nvml.Return)
}

// gpuDevice is one GPU as fingerprinted.
type gpuDevice struct {
	UUID      string
	Name      string
	MemoryMiB uint64
}

// gpuReport is what NVML said about the node.
type gpuReport struct {
	Available     bool   // NVML loaded and initialised
	Reason        string // why not, when !Available
	DriverVersion string
	CUDAVersion   string
	Devices       []gpuDevice
}

// gpuProbe initialises NVML once and answers fingerprint and stats queries.
type gpuProbe struct {
	lib NVML // nil: no NVML on this build or disabled

	mu sync.Mutex
	// Guarded by mu.
	inited  bool
	initErr string
}

func (p *gpuProbe) init() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lib == nil {
		return fmt.Errorf("NVML is not available")
	}
	if !p.inited && p.initErr == "" {
		if ret := safeInit(p.lib); ret != nvml.SUCCESS {
			p.initErr = fmt.Sprintf("NVML init: %s", nvml.ErrorString(ret))
		} else {
			p.inited = true
		}
	}
	if !p.inited {
		return fmt.Errorf("%s", p.initErr)
	}
	return nil
}

// safeInit calls Init, turning a panic of a broken library into an error.
func safeInit(lib NVML) (ret nvml.Return) {
	defer func() {
		if recover() != nil {
			ret = nvml.ERROR_LIBRARY_NOT_FOUND
		}
	}()
	return lib.Init()
}

func (p *gpuProbe) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inited {
		p.lib.Shutdown()
		p.inited = false
	}
}

// report fingerprints the GPUs.
func (p *gpuProbe) report() gpuReport {
	if err := p.init(); err != nil {
		return gpuReport{Reason: err.Error()}
	}
	r := gpuReport{Available: true}
	if v, ret := p.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		r.DriverVersion = v
	}
	if v, ret := p.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		r.CUDAVersion = fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
	}
	n, ret := p.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return gpuReport{Reason: fmt.Sprintf("NVML device count: %s", nvml.ErrorString(ret))}
	}
	for i := 0; i < n; i++ {
		d, ret := p.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		var g gpuDevice
		g.UUID, _ = d.GetUUID()
		g.Name, _ = d.GetName()
		if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryMiB = m.Total / (1 << 20)
		}
		r.Devices = append(r.Devices, g)
	}
	return r
}

// gpuUsage is one GPU's utilisation sample.
type gpuUsage struct {
	UUID          string
	UtilPercent   float64
	MemoryUsedB   uint64
	MemoryTotalB  uint64
	MemoryPercent float64
}

// usage samples the given GPUs; GPUs NVML does not know are skipped.
func (p *gpuProbe) usage(uuids []string) []gpuUsage {
	if len(uuids) == 0 || p.init() != nil {
		return nil
	}
	var out []gpuUsage
	for _, id := range uuids {
		d, ret := p.lib.DeviceGetHandleByUUID(id)
		if ret != nvml.SUCCESS {
			continue
		}
		u := gpuUsage{UUID: id}
		if r, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
			u.UtilPercent = float64(r.Gpu)
			u.MemoryPercent = float64(r.Memory)
		}
		if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			u.MemoryUsedB, u.MemoryTotalB = m.Used, m.Total
		}
		out = append(out, u)
	}
	return out
}

// Node attribute names (all under driver.train.).
const (
	attrVersion       = "driver.train.version"
	attrNVML          = "driver.train.nvml"
	attrGPUCount      = "driver.train.gpu.count"
	attrGPUModels     = "driver.train.gpu.models"
	attrGPUMemory     = "driver.train.gpu.memory"
	attrGPUTotalMem   = "driver.train.gpu.total_memory"
	attrGPUDriver     = "driver.train.gpu.driver_version"
	attrGPUCUDA       = "driver.train.gpu.cuda_version"
	healthDescHealthy = "Healthy"
)

// fingerprintResponse builds the response from the plugin version and the
// GPU report. The driver is healthy either way: without NVML it runs CPU
// work and says so in the attributes and the description.
func fingerprintResponse(version string, gpuEnabled bool, r gpuReport) *drivers.FingerprintResponse {
	attrs := map[string]*structs.Attribute{
		attrVersion: strAttr(version),
		attrNVML:    {Value: &structs.Attribute_BoolVal{BoolVal: r.Available}},
	}
	resp := &drivers.FingerprintResponse{
		Attributes:        attrs,
		Health:            drivers.FingerprintResponse_HEALTHY,
		HealthDescription: healthDescHealthy,
	}
	switch {
	case !gpuEnabled:
		resp.HealthDescription = "Healthy (GPU support disabled by gpu_stats = false; CPU tasks only)"
		return resp
	case !r.Available:
		resp.HealthDescription = "Healthy (no NVML: " + r.Reason + "; CPU tasks only)"
		return resp
	}
	attrs[attrGPUCount] = &structs.Attribute{Value: &structs.Attribute_IntVal{IntVal: int64(len(r.Devices))}}
	if r.DriverVersion != "" {
		attrs[attrGPUDriver] = strAttr(r.DriverVersion)
	}
	if r.CUDAVersion != "" {
		attrs[attrGPUCUDA] = strAttr(r.CUDAVersion)
	}
	if len(r.Devices) == 0 {
		return resp
	}
	models := map[string]bool{}
	var minMem, total uint64
	for i, d := range r.Devices {
		models[d.Name] = true
		total += d.MemoryMiB
		if i == 0 || d.MemoryMiB < minMem {
			minMem = d.MemoryMiB
		}
	}
	names := make([]string, 0, len(models))
	for m := range models {
		names = append(names, m)
	}
	sort.Strings(names)
	attrs[attrGPUModels] = strAttr(strings.Join(names, ","))
	attrs[attrGPUMemory] = &structs.Attribute{Value: &structs.Attribute_IntVal{IntVal: int64(minMem)}, Unit: "MiB"}
	attrs[attrGPUTotalMem] = &structs.Attribute{Value: &structs.Attribute_IntVal{IntVal: int64(total)}, Unit: "MiB"}
	return resp
}

func strAttr(s string) *structs.Attribute {
	return &structs.Attribute{Value: &structs.Attribute_StringVal{StringVal: s}}
}

// visibleGPUs lists the GPU UUIDs reserved for a task, from the device
// plugin's NVIDIA_VISIBLE_DEVICES.
func visibleGPUs(tc *drivers.TaskConfig) []string {
	v := tc.GetDeviceEnv()[envNvidiaVisible]
	if v == "" {
		v = tc.GetEnv()[envNvidiaVisible]
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" && s != "all" && s != "none" && s != "void" {
			out = append(out, s)
		}
	}
	return out
}

// fingerprintLoop sends a fingerprint at once, then every interval and
// whenever the plugin config changes, until ctx ends.
func (d *Driver) fingerprintLoop(ctx context.Context, send func(*drivers.FingerprintResponse) error) error {
	for {
		cfg, changed := d.currentConfig()
		if err := send(d.fingerprint(cfg)); err != nil {
			return err
		}
		t := time.NewTimer(cfg.StatsInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-changed:
			t.Stop()
		case <-t.C:
		}
	}
}

func (d *Driver) fingerprint(cfg PluginConfig) *drivers.FingerprintResponse {
	var r gpuReport
	if cfg.GPUStats {
		r = d.gpus.report()
	}
	return fingerprintResponse(d.version, cfg.GPUStats, r)
}
