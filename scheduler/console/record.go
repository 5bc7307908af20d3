package console

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

// FormatRecord is one line: step, epoch, metrics, generation, attempt.
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
	if r.Generation > 0 || r.Attempt > 0 {
		fmt.Fprintf(&b, " (generation %d, attempt %d)", r.Generation, r.Attempt)
	}
	return b.String()
}

// short is an ID's first eight characters, as Nomad's CLI shows them.
func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
