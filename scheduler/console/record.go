package console

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// FormatRecord is one line: step, epoch, metrics, the time trained,
// generation, attempt.
func FormatRecord(r storage.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %d", r.Step)
	if e, ok := r.Metrics["epoch"]; ok {
		fmt.Fprintf(&b, " epoch %v", e)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Metrics)) {
		if k != "epoch" {
			fmt.Fprintf(&b, " %s=%v", k, r.Metrics[k])
		}
	}
	var notes []string
	if r.TimeTotal > 0 {
		notes = append(notes, "trained "+roundTrained(r.TimeTotal).String())
	}
	if r.Generation > 0 || r.Attempt > 0 {
		notes = append(notes, fmt.Sprintf("generation %d, attempt %d", r.Generation, r.Attempt))
	}
	if len(notes) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(notes, ", "))
	}
	return b.String()
}

// roundTrained rounds a time trained for reading: to the second from a
// minute up, to the millisecond below.
func roundTrained(d time.Duration) time.Duration {
	if d >= time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// short is an ID's first eight characters, as Nomad's CLI shows them.
func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
