package rendezvous

import (
	"context"
	"testing"

	"github.com/shoenig/test/must"
)

// Stops counts the generations in a range that ended in an agreed stop,
// and nothing else under the run's generations: not another run's, not a
// member's key that happens to end like a stop record.
func TestStopsCountsAgreedStops(t *testing.T) {
	ctx := context.Background()
	st := NewMemStore(nil)
	must.NoError(t, RecordStop(ctx, st, "run", 2, []string{"m1"}))
	must.NoError(t, RecordStop(ctx, st, "run", 5, []string{"m0", "m1"}))
	must.NoError(t, RecordStop(ctx, st, "run", 5, []string{"m2"})) // the first record stays
	must.NoError(t, RecordStop(ctx, st, "run/other", 3, nil))
	must.NoError(t, RecordStop(ctx, st, "ru", 3, nil))
	_, _, err := st.CompareAndSet(ctx, "run/gen/3/done/stopped", []byte("x"), 0)
	must.NoError(t, err)

	cases := []struct {
		name     string
		from, to uint64
		want     int
	}{
		{"all", 1, 10, 2},
		{"to is exclusive", 1, 5, 1},
		{"from is inclusive", 5, 6, 1},
		{"none in range", 3, 5, 0},
		{"empty range", 4, 4, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := Stops(ctx, st, "run", c.from, c.to)
			must.NoError(t, err)
			must.Eq(t, c.want, n)
		})
	}
	v, err := st.Get(ctx, stopKey("run", 5))
	must.NoError(t, err)
	must.Eq(t, `{"leaving":["m0","m1"]}`, string(v.Data))
}
