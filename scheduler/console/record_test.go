package console

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/storage"
)

func TestFormatRecord(t *testing.T) {
	for _, tc := range []struct {
		rec  storage.Record
		want string
	}{
		{storage.Record{Step: 3, Metrics: map[string]any{"loss": 0.5, "epoch": 2.0}}, "step 3 epoch 2 loss=0.5"},
		{storage.Record{Step: 3, Metrics: map[string]any{"loss": 0.5}, TimeTotal: 1234567 * time.Microsecond},
			"step 3 loss=0.5 (trained 1.235s)"},
		{storage.Record{Step: 900, Metrics: map[string]any{}, TimeTotal: 3*time.Hour + 2*time.Minute + 1500*time.Millisecond,
			Generation: 2, Attempt: 1}, "step 900 (trained 3h2m2s, generation 2, attempt 1)"},
		{storage.Record{Step: 1, Generation: 1}, "step 1 (generation 1, attempt 0)"},
	} {
		must.EqOp(t, tc.want, FormatRecord(tc.rec))
	}
}
