package driver

import (
	"bytes"
	"testing"
	"time"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// FuzzSplitEvents: the events file is written by the task, so any bytes
// can be in it. splitEvents must consume only whole lines (or a line too
// long to keep), return events with a kind, and give the same events when
// the bytes arrive in two reads as in one; the coalescer must pass every
// lifecycle event.
func FuzzSplitEvents(f *testing.F) {
	f.Add([]byte(`{"time":"2026-01-01T00:00:00Z","kind":"rendezvous_complete","message":"rank 0 of 2, generation 1","attrs":{"generation":"1","rank":"0"}}
{"time":"2026-01-01T00:00:01Z","kind":"checkpoint_committed","message":"checkpoint 1 committed at step 1","attrs":{"checkpoint":"checkpoint_000001","step":"1"}}
not json

{"kind":"worker_finished","message":"training function returned"}
{"kind":"checkpoint_comm`), 7)
	f.Add([]byte("{\"kind\":\"a\",\"attrs\":{\"x\":null}}\n{\"kind\":\"\"}\n\xff\xfe\n"), 3)
	f.Add(bytes.Repeat([]byte("x"), maxEventLine+2), 100)
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		evs, n, _ := splitEvents(b)
		if n < 0 || n > len(b) {
			t.Fatalf("consumed %d of %d bytes", n, len(b))
		}
		if n < len(b) && n > 0 && b[n-1] != '\n' && len(b) <= maxEventLine {
			t.Fatalf("consumed a partial line: %q", b[:n])
		}
		for _, ev := range evs {
			if ev.Kind == "" {
				t.Fatalf("event without a kind: %+v", ev)
			}
		}
		// Two reads: the first part, then the rest after the leftover.
		if len(b) > 0 && len(b) <= maxEventLine {
			if cut < 0 {
				cut = -cut
			}
			cut %= len(b) + 1
			first, m, _ := splitEvents(b[:cut])
			rest := append(append([]byte{}, b[m:cut]...), b[cut:]...)
			second, _, _ := splitEvents(rest)
			if got := len(first) + len(second); got != len(evs) {
				t.Fatalf("%d events in one read, %d in two (cut at %d)", len(evs), got, cut)
			}
		}
		co := newEventCoalescer(time.Minute)
		var out []workerenv.Event
		now := time.Unix(0, 0)
		for _, ev := range evs {
			out = append(out, co.offer(ev, now)...)
		}
		out = append(out, co.flush(now)...)
		lifecycle := 0
		for _, ev := range evs {
			if ev.Kind != kindCheckpoint {
				lifecycle++
			}
		}
		passed := 0
		for _, ev := range out {
			if ev.Kind != kindCheckpoint {
				passed++
			}
		}
		if passed != lifecycle {
			t.Fatalf("%d lifecycle events in, %d out", lifecycle, passed)
		}
	})
}
