package driver

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
)

func newTestDriver(t *testing.T, lib NVML, r Runner) *Driver {
	t.Helper()
	if r == nil {
		r = &fakeRunner{}
	}
	d, err := New(Options{Runner: r, NVML: lib, SelfPath: "/bin/true", HostName: "host-a", EventPoll: 10 * time.Millisecond})
	must.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

func TestFingerprintWithMockNVML(t *testing.T) {
	d := newTestDriver(t, dgxh100.New(), nil)
	fp := d.fingerprint(DefaultPluginConfig())
	must.Eq(t, drivers.FingerprintResponse_HEALTHY, fp.GetHealth())
	must.Eq(t, "Healthy", fp.GetHealthDescription())
	a := fp.GetAttributes()
	must.True(t, a[attrNVML].GetBoolVal())
	must.Eq(t, int64(8), a[attrGPUCount].GetIntVal())
	must.Eq(t, "NVIDIA H100 80GB HBM3", a[attrGPUModels].GetStringVal())
	must.Eq(t, "550.54.15", a[attrGPUDriver].GetStringVal())
	must.Eq(t, "12.4", a[attrGPUCUDA].GetStringVal())
	must.Eq(t, "MiB", a[attrGPUMemory].GetUnit())
	must.Greater(t, int64(70_000), a[attrGPUMemory].GetIntVal()) // an 80 GB part
	must.Eq(t, 8*a[attrGPUMemory].GetIntVal(), a[attrGPUTotalMem].GetIntVal())
	must.Eq(t, PluginVersion, a[attrVersion].GetStringVal())
}

func TestFingerprintWithoutNVML(t *testing.T) {
	var inits int
	broken := &mock.Interface{InitFunc: func() nvml.Return { inits++; return nvml.ERROR_LIBRARY_NOT_FOUND }}
	cases := []struct {
		name string
		lib  NVML
		cfg  PluginConfig
		desc string
	}{
		{"library missing", broken, DefaultPluginConfig(), "no NVML"},
		{"no library at all", nil, DefaultPluginConfig(), "no NVML"},
		{"gpu stats off", dgxh100.New(), PluginConfig{GPUStats: false, StatsInterval: time.Second}, "disabled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newTestDriver(t, tc.lib, nil)
			fp := d.fingerprint(tc.cfg)
			must.Eq(t, drivers.FingerprintResponse_HEALTHY, fp.GetHealth())
			must.StrContains(t, fp.GetHealthDescription(), tc.desc)
			must.False(t, fp.GetAttributes()[attrNVML].GetBoolVal())
			_, hasCount := fp.GetAttributes()[attrGPUCount]
			must.False(t, hasCount)
		})
	}
	// A failed init is not retried on every fingerprint.
	d := newTestDriver(t, broken, nil)
	inits = 0
	d.fingerprint(DefaultPluginConfig())
	d.fingerprint(DefaultPluginConfig())
	must.Eq(t, 1, inits)
}

func TestFingerprintLoopResendsPeriodicallyAndOnChange(t *testing.T) {
	d := newTestDriver(t, nil, nil)
	d.setConfig(PluginConfig{GPUStats: false, StatsInterval: time.Hour}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan *drivers.FingerprintResponse, 10)
	done := make(chan error, 1)
	go func() {
		done <- d.fingerprintLoop(ctx, func(r *drivers.FingerprintResponse) error {
			got <- r
			return nil
		})
	}()
	first := <-got
	must.StrContains(t, first.GetHealthDescription(), "disabled")
	// A config change is sent at once, not after the hour.
	d.setConfig(PluginConfig{GPUStats: true, StatsInterval: 20 * time.Millisecond}, nil)
	second := <-got
	must.StrContains(t, second.GetHealthDescription(), "no NVML")
	<-got // and then periodically
	cancel()
	must.NoError(t, <-done)
}

func TestGPUUsageAndStats(t *testing.T) {
	srv := dgxh100.New()
	dev := srv.Devices[3].(*server.Device)
	dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{Gpu: 73, Memory: 40}, nvml.SUCCESS
	}
	d := newTestDriver(t, srv, nil)
	u := d.gpus.usage([]string{dev.UUID, "GPU-not-here"})
	must.SliceLen(t, 1, u)
	must.Eq(t, 73.0, u[0].UtilPercent)
	must.Positive(t, u[0].MemoryTotalB)

	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := taskStats("t1", 42, Usage{CPUPercent: 12.5, RSS: 1 << 20, Measured: []string{"Percent", "RSS", "Bogus"}, Time: at}, u)
	must.Eq(t, at, s.GetTimestamp().AsTime())
	must.Eq(t, 12.5, s.GetAggResourceUsage().GetCpu().GetPercent())
	must.Eq(t, []drivers.CPUUsage_Fields{drivers.CPUUsage_PERCENT}, s.GetAggResourceUsage().GetCpu().GetMeasuredFields())
	must.Eq(t, []drivers.MemoryUsage_Fields{drivers.MemoryUsage_RSS}, s.GetAggResourceUsage().GetMemory().GetMeasuredFields())
	must.NotNil(t, s.GetResourceUsageByPid()["42"])
	must.Eq(t, 73.0, s.GetResourceUsageByPid()["gpu:"+dev.UUID].GetCpu().GetPercent())
}

// fakeRunner is a Runner whose processes live in memory.
type fakeRunner struct {
	mu       sync.Mutex
	startErr error
	started  []ProcessSpec
}

func (f *fakeRunner) Start(_ context.Context, s ProcessSpec) (Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return nil, f.startErr
	}
	f.started = append(f.started, s)
	return newFakeProcess(), nil
}

func (f *fakeRunner) Recover(context.Context, json.RawMessage) (Process, error) {
	return nil, errors.New("fake runner cannot recover")
}
