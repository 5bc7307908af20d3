package trainer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/storage"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// TestReportRestoreTimesTheRestore: a restore is a milestone of its own
// (a task event on Nomad), with the checkpoint, its step and how long it
// took; the multi-node proof splits node loss to first step with it. No
// checkpoint to restore is no event.
func TestReportRestoreTimesTheRestore(t *testing.T) {
	cases := []struct {
		name    string
		restore storage.Restore
		want    []workerenv.Event
	}{
		{"restored", storage.Restore{Name: "checkpoint_000003", OK: true, Record: storage.Record{Step: 3}},
			[]workerenv.Event{{Kind: "checkpoint_restored", Message: "checkpoint checkpoint_000003 (step 3) restored in 1.25s",
				Attrs: map[string]string{"checkpoint": "checkpoint_000003", "step": "3", "seconds": "1.250"}}}},
		{"nothing to restore", storage.Restore{}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "events.jsonl")
			s := &Session{events: openEventLog(path)}
			s.reportRestore(tc.restore, 1250*time.Millisecond)
			s.events.close()
			b, err := os.ReadFile(path)
			must.NoError(t, err)
			var got []workerenv.Event
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if line == "" {
					continue
				}
				var ev workerenv.Event
				must.NoError(t, json.Unmarshal([]byte(line), &ev))
				ev.Time = time.Time{}
				got = append(got, ev)
			}
			must.Eq(t, tc.want, got)
		})
	}
}
