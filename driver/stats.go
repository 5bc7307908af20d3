package driver

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
)

// cpuFields and memFields map Nomad's Go-side measured-field names to the
// wire enums.
var cpuFields = map[string]drivers.CPUUsage_Fields{
	"System Mode":       drivers.CPUUsage_SYSTEM_MODE,
	"User Mode":         drivers.CPUUsage_USER_MODE,
	"Total Ticks":       drivers.CPUUsage_TOTAL_TICKS,
	"Throttled Periods": drivers.CPUUsage_THROTTLED_PERIODS,
	"Throttled Time":    drivers.CPUUsage_THROTTLED_TIME,
	"Percent":           drivers.CPUUsage_PERCENT,
}

var memFields = map[string]drivers.MemoryUsage_Fields{
	"RSS":              drivers.MemoryUsage_RSS,
	"Cache":            drivers.MemoryUsage_CACHE,
	"Max Usage":        drivers.MemoryUsage_MAX_USAGE,
	"Kernel Usage":     drivers.MemoryUsage_KERNEL_USAGE,
	"Kernel Max Usage": drivers.MemoryUsage_KERNEL_MAX_USAGE,
	"Usage":            drivers.MemoryUsage_USAGE,
	"Swap":             drivers.MemoryUsage_SWAP,
}

// gpuPIDPrefix keys GPU samples in resource_usage_by_pid. Nomad's
// TaskStats has no GPU fields, and the client passes that map through to
// the API unchanged, so GPU utilisation rides there under "gpu:<uuid>":
// cpu.percent is the GPU's utilisation and memory.usage its used memory.
const gpuPIDPrefix = "gpu:"

// taskStats turns a sample into the wire message. Every message field the
// client dereferences is set.
func taskStats(id string, pid int, u Usage, gpus []gpuUsage) *drivers.TaskStats {
	agg := &drivers.TaskResourceUsage{
		Cpu: &drivers.CPUUsage{
			SystemMode: u.SystemMode,
			UserMode:   u.UserMode,
			TotalTicks: u.TotalTicks,
			Percent:    u.CPUPercent,
		},
		Memory: &drivers.MemoryUsage{Rss: u.RSS, Swap: u.Swap, MaxUsage: u.MaxUsage},
	}
	for _, m := range u.Measured {
		if f, ok := cpuFields[m]; ok {
			agg.Cpu.MeasuredFields = append(agg.Cpu.MeasuredFields, f)
		}
		if f, ok := memFields[m]; ok {
			agg.Memory.MeasuredFields = append(agg.Memory.MeasuredFields, f)
		}
	}
	at := u.Time
	if at.IsZero() {
		at = time.Now()
	}
	byPID := map[string]*drivers.TaskResourceUsage{}
	if pid > 0 {
		byPID[strconv.Itoa(pid)] = agg
	}
	for _, g := range gpus {
		byPID[gpuPIDPrefix+g.UUID] = &drivers.TaskResourceUsage{
			Cpu: &drivers.CPUUsage{
				Percent:        g.UtilPercent,
				MeasuredFields: []drivers.CPUUsage_Fields{drivers.CPUUsage_PERCENT},
			},
			Memory: &drivers.MemoryUsage{
				Usage:          g.MemoryUsedB,
				MaxUsage:       g.MemoryTotalB,
				MeasuredFields: []drivers.MemoryUsage_Fields{drivers.MemoryUsage_USAGE, drivers.MemoryUsage_MAX_USAGE},
			},
		}
	}
	return &drivers.TaskStats{
		Id:                 id,
		Timestamp:          timestamppb.New(at),
		AggResourceUsage:   agg,
		ResourceUsageByPid: byPID,
	}
}

// statsLoop samples h every interval and sends until ctx ends or the task
// exits. A failed sample is skipped, not fatal: the stream outlives
// hiccups of the process table.
func (d *Driver) statsLoop(ctx context.Context, h *taskHandle, interval time.Duration, gpuStats bool, send func(*drivers.TaskStatsResponse) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		u, err := h.proc.Stats(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			h.logger.Debug("task stats sample failed", "error", err)
		} else {
			var g []gpuUsage
			if gpuStats {
				g = d.gpus.usage(h.gpuUUIDs)
			}
			if err := send(&drivers.TaskStatsResponse{Stats: taskStats(h.id, h.proc.PID(), u, g)}); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-h.done:
			return nil
		case <-t.C:
		}
	}
}
