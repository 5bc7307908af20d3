package driver

import (
	"maps"
	"strconv"
	"time"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// DefaultCheckpointEventEvery is the default least spacing of checkpoint
// task events (Options.CheckpointEventEvery).
const DefaultCheckpointEventEvery = 30 * time.Second

// kindCheckpoint is the runtime's event for a committed checkpoint, the one
// kind that comes once per report.
const kindCheckpoint = "checkpoint_committed"

// eventCoalescer decides which runtime events become Nomad task events.
// Nomad keeps ten events per task and sends each through the servers' Raft
// log, so a run that checkpoints every step must not turn every checkpoint
// into one: lifecycle events (rendezvous, generations, failures, budget,
// stop, exit) always pass; a checkpoint passes at most once per every, and
// the newest one held back passes before the next lifecycle event, when its
// time comes (due) or when the task ends (flush), so the last checkpoint
// before a stop or an exit is never lost. A passed checkpoint held others
// back says how many in its "coalesced" annotation.
//
// It does no I/O and reads no clock: callers pass the time. Not safe for
// concurrent use; each events tailer owns one.
type eventCoalescer struct {
	every time.Duration

	lastSent time.Time        // when a checkpoint last passed; zero: never
	held     *workerenv.Event // newest checkpoint held back, if any
	skipped  int              // checkpoints held back since the last one passed, held included
}

func newEventCoalescer(every time.Duration) *eventCoalescer {
	return &eventCoalescer{every: every}
}

// offer takes the next event at now and returns what to publish, in order.
func (c *eventCoalescer) offer(ev workerenv.Event, now time.Time) []workerenv.Event {
	if ev.Kind != kindCheckpoint {
		return append(c.flush(now), ev)
	}
	c.held = &ev
	c.skipped++
	if c.lastSent.IsZero() || now.Sub(c.lastSent) >= c.every {
		return c.flush(now)
	}
	return nil
}

// due returns the held checkpoint once every has passed since the last one
// went out, so a run that stops checkpointing still shows its last step.
func (c *eventCoalescer) due(now time.Time) []workerenv.Event {
	if c.held == nil || now.Sub(c.lastSent) < c.every {
		return nil
	}
	return c.flush(now)
}

// flush returns the held checkpoint, if any, now.
func (c *eventCoalescer) flush(now time.Time) []workerenv.Event {
	if c.held == nil {
		return nil
	}
	ev := *c.held
	if c.skipped > 1 {
		attrs := make(map[string]string, len(ev.Attrs)+1)
		maps.Copy(attrs, ev.Attrs)
		attrs["coalesced"] = strconv.Itoa(c.skipped - 1)
		ev.Attrs = attrs
	}
	c.held, c.skipped, c.lastSent = nil, 0, now
	return []workerenv.Event{ev}
}
