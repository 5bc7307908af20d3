package trainer

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestStallLimit(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name      string
		intervals []time.Duration
		want      time.Duration
	}{
		{"no history: the floor", nil, time.Second},
		{"fast steps: the floor", []time.Duration{10 * ms, 12 * ms, 11 * ms}, time.Second},
		{"slow steps: factor times the median", []time.Duration{200 * ms, 300 * ms, 250 * ms}, 2500 * ms},
		{"even count: mean of the middle two", []time.Duration{100 * ms, 300 * ms, 200 * ms, 400 * ms}, 2500 * ms},
		{"one long pause does not move the median", []time.Duration{200 * ms, 200 * ms, 90 * time.Second, 200 * ms}, 2000 * ms},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.want, stallLimit(tc.intervals, time.Second, 10))
		})
	}
}

func TestWatchdogStalls(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := newWatchdog(time.Second, 10, t0)
	for i := 1; i <= 10; i++ {
		w.progress(t0.Add(time.Duration(i) * 200 * time.Millisecond)) // 200 ms steps
	}
	last := t0.Add(2 * time.Second)
	_, limit, hung := w.stalled(last.Add(1900 * time.Millisecond))
	must.Eq(t, 2*time.Second, limit)
	must.False(t, hung)
	since, _, hung := w.stalled(last.Add(2100 * time.Millisecond))
	must.True(t, hung)
	must.Eq(t, 2100*time.Millisecond, since)
	// The window keeps only the recent past.
	for i := 0; i < 2*watchdogWindow; i++ {
		last = last.Add(10 * time.Millisecond)
		w.progress(last)
	}
	must.Eq(t, time.Second, w.limit())
}
