package executor

import (
	"context"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestStatsOfBusyTree(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	task := startTask(t, f.config("busy"))
	expectLine(t, f.outLines, "allocated")
	ctx := context.Background()
	// A busy tree shows CPU once it has been scheduled between two samples;
	// on a loaded machine that may take a while, so sample until it has
	// (a tree that never uses CPU fails at the deadline).
	busy := func() Usage {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			time.Sleep(200 * time.Millisecond)
			u, err := task.Stats(ctx)
			must.NoError(t, err)
			if u.CPUPercent > 0 && u.UserMode > 0 || time.Now().After(deadline) {
				return u
			}
		}
	}
	u := busy()
	must.Greater(t, 0, u.CPUPercent) // percent of one core; the host may be loaded
	must.Greater(t, 0, u.UserMode)
	must.GreaterEq(t, 64<<20, u.RSS) // the child's memory counts
	must.SliceContains(t, u.Measured, MeasuredRSS)
	must.SliceContains(t, u.Measured, MeasuredPercent)
	u2 := busy()
	must.Greater(t, 0, u2.CPUPercent)
	must.True(t, u2.Time.After(u.Time))
}

func TestCPUUsage(t *testing.T) {
	cases := []struct {
		name      string
		prev, cur cpuSample
		interval  time.Duration
		mhz       float64
		pct, user float64
		ticks     float64
	}{
		{name: "one core busy", prev: cpuSample{1, 0, 1}, cur: cpuSample{2, 0, 2}, interval: time.Second, mhz: 2000, pct: 100, user: 100, ticks: 2000},
		{name: "half a core", prev: cpuSample{0, 0, 0}, cur: cpuSample{0.5, 0.5, 1}, interval: 2 * time.Second, pct: 50, user: 25},
		{name: "zero interval", cur: cpuSample{1, 1, 2}, interval: 0},
		{name: "counter went back", prev: cpuSample{5, 5, 10}, cur: cpuSample{1, 1, 2}, interval: time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := cpuUsage(tc.prev, tc.cur, tc.interval, tc.mhz)
			must.Eq(t, tc.pct, u.CPUPercent)
			must.Eq(t, tc.user, u.UserMode)
			must.Eq(t, tc.ticks, u.TotalTicks)
			must.Eq(t, tc.mhz > 0, contains(u.Measured, MeasuredTotalTicks))
		})
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
