//go:build multinode

package multinode

import (
	"bufio"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

// eventsFile is where the driver points a worker's NOMAD_TRAIN_EVENTS:
// the task's local directory.
const eventsFile = "nomad-train-events.jsonl"

// readEvents reads every worker's events file through Nomad's alloc
// filesystem API (each client's data directory is its own, seen by its
// processes only), oldest first; workers on the lost node are gone.
func readEvents(t *testing.T, c *cluster, jobID, lostNode string) []workerenv.Event {
	t.Helper()
	stubs, _, err := c.api.Jobs().Allocations(jobID, true, nil)
	if err != nil {
		t.Fatalf("list allocations: %v", err)
	}
	var out []workerenv.Event
	for _, s := range stubs {
		if s.NodeID != lostNode {
			evs, err := allocEvents(c, s.ID)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, evs...)
		}
	}
	slices.SortStableFunc(out, func(a, b workerenv.Event) int { return a.Time.Compare(b.Time) })
	return out
}

// allocEvents reads the events file of one allocation's worker.
func allocEvents(c *cluster, allocID string) ([]workerenv.Event, error) {
	a, _, err := c.api.Allocations().Info(allocID, nil)
	if err != nil {
		return nil, fmt.Errorf("allocation %s: %w", allocID, err)
	}
	rc, err := c.api.AllocFS().Cat(a, path.Join(trainspec.WorkerTask, "local", eventsFile), nil)
	if err != nil {
		return nil, fmt.Errorf("read the events of allocation %s: %w", allocID, err)
	}
	defer rc.Close()
	var out []workerenv.Event
	sc := bufio.NewScanner(rc)
	for sc.Scan() {
		var ev workerenv.Event
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			out = append(out, ev)
		}
	}
	return out, nil
}

// lastEventOf is the last event of kind.
func lastEventOf(events []workerenv.Event, kind string) (workerenv.Event, bool) {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Kind == kind {
			return events[i], true
		}
	}
	return workerenv.Event{}, false
}

// firstEvent is the first event of kind after t.
func firstEvent(events []workerenv.Event, kind string, after time.Time) (workerenv.Event, bool) {
	for _, ev := range events {
		if ev.Kind == kind && ev.Time.After(after) {
			return ev, true
		}
	}
	return workerenv.Event{}, false
}

// split is what the proof saw of a node loss, for B10.
type split struct {
	kill, down   time.Time
	replacements []*api.Allocation
	events       []workerenv.Event
	resumed      storage.Record
}

// logSplit logs node loss to the first resumed report in its parts:
// Nomad's (node-down detection, rescheduling, start: placed to the worker
// process running) and ours (rendezvous: the last worker of the new
// generation joined; rank 0 opened the run's storage, taking its writer
// lease; restore: rank 0 found, downloaded and checked the checkpoint; the
// first report after it).
func logSplit(t *testing.T, s split) {
	t.Helper()
	var placed, started time.Time
	for _, r := range s.replacements {
		placed = later(placed, time.Unix(0, r.CreateTime))
		started = later(started, r.TaskStates[trainspec.WorkerTask].StartedAt)
	}
	var formed, restored time.Time
	var fetch time.Duration // of the restore: finding, downloading, checking
	gen := strconv.FormatUint(s.resumed.Generation, 10)
	for _, ev := range s.events {
		switch {
		case ev.Kind == "rendezvous_complete" && ev.Attrs["generation"] == gen:
			formed = later(formed, ev.Time)
		case ev.Kind == "checkpoint_restored" && ev.Time.After(s.kill) && restored.IsZero():
			restored = ev.Time
			secs, _ := strconv.ParseFloat(ev.Attrs["seconds"], 64)
			fetch = time.Duration(secs * float64(time.Second))
		}
	}
	parts := []struct {
		name     string
		from, to time.Time
	}{
		{"node-down detection (Nomad)", s.kill, s.down},
		{"rescheduling (Nomad)", s.down, placed},
		{"start: placed to worker running (Nomad client, train driver)", placed, started},
		{"rendezvous: the new generation formed (ours)", started, formed},
		{"open the run's storage on rank 0: the S3 writer lease (ours)", formed, restored.Add(-fetch)},
		{"restore: find, download and verify on rank 0 (ours)", restored.Add(-fetch), restored},
		{"first report after the restore (ours; one epoch)", restored, s.resumed.Time},
	}
	t.Logf("B10 node loss to the first resumed report: %.2fs", s.resumed.Time.Sub(s.kill).Seconds())
	for _, p := range parts {
		t.Logf("B10   %-62s %6.2fs", p.name, p.to.Sub(p.from).Seconds())
	}
	t.Logf("B10   ours (worker started to first report)%22s %6.2fs", "", s.resumed.Time.Sub(started).Seconds())
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
