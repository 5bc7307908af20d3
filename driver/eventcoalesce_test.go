package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

func ckptEvent(step int) workerenv.Event {
	return workerenv.Event{Kind: kindCheckpoint, Message: fmt.Sprintf("checkpoint %d committed at step %d", step, step),
		Attrs: map[string]string{"step": fmt.Sprint(step)}}
}

// describe is "kind" or "kind step=N coalesced=M" for a transcript.
func describe(evs []workerenv.Event) []string {
	var out []string
	for _, ev := range evs {
		s := ev.Kind
		if st, ok := ev.Attrs["step"]; ok {
			s += " step=" + st
		}
		if n, ok := ev.Attrs["coalesced"]; ok {
			s += " coalesced=" + n
		}
		out = append(out, s)
	}
	return out
}

// TestEventCoalescer runs transcripts through the coalescer on a clock of
// whole seconds: op is an event kind ("ckpt" for a checkpoint at that
// step), "due" or "flush".
func TestEventCoalescer(t *testing.T) {
	type step struct {
		at   int // seconds
		op   string
		step int
		want []string
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		steps []step
	}{
		{"first checkpoint passes, the next within 30s is held", []step{
			{at: 0, op: "ckpt", step: 1, want: []string{"checkpoint_committed step=1"}},
			{at: 1, op: "ckpt", step: 2},
			{at: 2, op: "ckpt", step: 3},
			{at: 29, op: "due"},
			{at: 30, op: "ckpt", step: 4, want: []string{"checkpoint_committed step=4 coalesced=2"}},
			{at: 31, op: "ckpt", step: 5},
			{at: 60, op: "due", want: []string{"checkpoint_committed step=5"}},
			{at: 61, op: "due"},
			{at: 200, op: "flush"},
		}},
		{"lifecycle events pass at once, after the held checkpoint", []step{
			{at: 0, op: "ckpt", step: 1, want: []string{"checkpoint_committed step=1"}},
			{at: 1, op: "ckpt", step: 2},
			{at: 2, op: "ckpt", step: 3},
			{at: 3, op: "stop_requested", want: []string{"checkpoint_committed step=3 coalesced=1", "stop_requested"}},
			{at: 4, op: "ckpt", step: 4},
			{at: 5, op: "worker_finished", want: []string{"checkpoint_committed step=4", "worker_finished"}},
			{at: 6, op: "flush"},
		}},
		{"a burst of lifecycle events all passes", []step{
			{at: 0, op: "rendezvous_complete", want: []string{"rendezvous_complete"}},
			{at: 0, op: "generation_changed", want: []string{"generation_changed"}},
			{at: 0, op: "failure_budget_used", want: []string{"failure_budget_used"}},
			{at: 0, op: "rendezvous_complete", want: []string{"rendezvous_complete"}},
			{at: 0, op: "worker_failed", want: []string{"worker_failed"}},
		}},
		{"the last checkpoint before the end comes out on flush", []step{
			{at: 0, op: "ckpt", step: 10, want: []string{"checkpoint_committed step=10"}},
			{at: 5, op: "ckpt", step: 11},
			{at: 6, op: "ckpt", step: 12},
			{at: 7, op: "flush", want: []string{"checkpoint_committed step=12 coalesced=1"}},
			{at: 8, op: "flush"},
			{at: 9, op: "ckpt", step: 13}, // 2s after the flush sent one
			{at: 39, op: "due", want: []string{"checkpoint_committed step=13"}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			co := newEventCoalescer(30 * time.Second)
			for i, s := range c.steps {
				now := t0.Add(time.Duration(s.at) * time.Second)
				var got []workerenv.Event
				switch s.op {
				case "ckpt":
					got = co.offer(ckptEvent(s.step), now)
				case "due":
					got = co.due(now)
				case "flush":
					got = co.flush(now)
				default:
					got = co.offer(workerenv.Event{Kind: s.op}, now)
				}
				must.Eq(t, s.want, describe(got), must.Sprintf("step %d (%s at %ds)", i, s.op, s.at))
			}
		})
	}
}

// TestEventCoalescerKeepsAttrs: the held event's own attributes are not
// changed when the count is added.
func TestEventCoalescerKeepsAttrs(t *testing.T) {
	co := newEventCoalescer(time.Minute)
	t0 := time.Unix(0, 0)
	co.offer(ckptEvent(1), t0)
	held := ckptEvent(2)
	co.offer(ckptEvent(1), t0)
	co.offer(held, t0)
	out := co.flush(t0)
	must.Eq(t, "1", out[0].Attrs["coalesced"])
	must.MapNotContainsKey(t, held.Attrs, "coalesced")
}

// TestEventTailerCoalescesCheckpoints: a task that checkpoints every step
// for 200 steps and then stops yields four task events, not 202; before
// the coalescer each line became a Nomad task event and pushed the
// lifecycle ones out of the ten Nomad keeps.
func TestEventTailerCoalescesCheckpoints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	var lines []string
	for s := 1; s <= 200; s++ {
		lines = append(lines, fmt.Sprintf(`{"kind":"checkpoint_committed","message":"m","attrs":{"step":"%d"}}`, s))
	}
	lines = append(lines, `{"kind":"stop_requested","message":"terminated"}`, `{"kind":"checkpoint_committed","attrs":{"step":"201"}}`)
	must.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))

	now := time.Unix(1000, 0)
	var got []workerenv.Event
	tl := &eventTailer{path: path, interval: time.Hour, logger: hclogNull(),
		publish:  func(ev workerenv.Event) { got = append(got, ev) },
		coalesce: newEventCoalescer(DefaultCheckpointEventEvery), now: func() time.Time { return now }}
	done := make(chan struct{})
	close(done) // the task has exited: run reads what is there, flushes and returns
	tl.run(context.Background(), done)
	must.Eq(t, []string{
		"checkpoint_committed step=1",
		"checkpoint_committed step=200 coalesced=198",
		"stop_requested",
		"checkpoint_committed step=201",
	}, describe(got))
}

// TestEventTailerRefusesSymlinksAndFIFOs: the events file is in the task's
// directory and the driver reads it as root. A symlink there to a file of
// events the task may not read was followed and its lines published as the
// task's events; a FIFO blocked the tailer in open.
func TestEventTailerRefusesSymlinksAndFIFOs(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "root-only.jsonl")
	must.NoError(t, os.WriteFile(secret, []byte(`{"kind":"leak","message":"private"}`+"\n"), 0o600))
	link := filepath.Join(dir, "link.jsonl")
	must.NoError(t, os.Symlink(secret, link))
	fifo := filepath.Join(dir, "fifo.jsonl")
	must.NoError(t, syscall.Mkfifo(fifo, 0o600))
	// The task's local dir made a link to another task's: the file there
	// is reached only through a link, and is refused.
	other := filepath.Join(dir, "other-task-local")
	must.NoError(t, os.Mkdir(other, 0o700))
	must.NoError(t, os.WriteFile(filepath.Join(other, "events.jsonl"), []byte(`{"kind":"leak","message":"private"}`+"\n"), 0o600))
	must.NoError(t, os.Symlink(other, filepath.Join(dir, "local")))
	viaDir := filepath.Join(dir, "local", "events.jsonl")
	for _, path := range []string{link, fifo, viaDir} {
		t.Run(filepath.Base(filepath.Dir(path))+"/"+filepath.Base(path), func(t *testing.T) {
			var got []workerenv.Event
			tl := &eventTailer{path: path, interval: time.Hour, logger: hclogNull(), publish: func(ev workerenv.Event) { got = append(got, ev) }}
			err := tl.readNew()
			must.True(t, errors.Is(err, errEventsFile), must.Sprintf("got %v", err))
			must.SliceEmpty(t, got)
		})
	}
	// A file that is not the task user's (another job's, hard-linked or
	// reached some other way) is refused; the user's own is read.
	own := filepath.Join(dir, "own.jsonl")
	must.NoError(t, os.WriteFile(own, []byte(`{"kind":"mine","message":"ok"}`+"\n"), 0o600))
	for _, tc := range []struct {
		owner int
		read  bool
	}{{os.Getuid(), true}, {os.Getuid() + 1, false}} {
		var got []workerenv.Event
		tl := &eventTailer{path: own, owner: tc.owner, ownerKnown: true, interval: time.Hour, logger: hclogNull(),
			publish: func(ev workerenv.Event) { got = append(got, ev) }}
		err := tl.readNew()
		if tc.read {
			must.NoError(t, err)
			must.SliceLen(t, 1, got)
		} else {
			must.ErrorIs(t, err, errEventsFile)
			must.ErrorContains(t, err, "not the task's user")
			must.SliceEmpty(t, got)
		}
	}
}
