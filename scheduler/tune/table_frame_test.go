package tune

import (
	"bytes"
	"testing"

	"github.com/shoenig/test/must"
)

// frames records the tables a Framer gets.
type frames struct {
	bytes.Buffer // what is written to it as output
	got          []string
}

func (f *frames) Frame(table string) { f.got = append(f.got, table) }

// A Framer (a terminal) gets each table whole, as one frame to redraw in
// place; a plain writer gets the same text as output.
func TestWriteTableFrames(t *testing.T) {
	st := &ExperimentState{Name: "sweep", Trials: []*TrialState{
		{ID: "trial_0000", Status: StatusRunning, Params: map[string]any{"lr": 0.1}, Iterations: 3,
			LastResult: map[string]any{"loss": 0.5}, TimeTotal: 12.345678},
		{ID: "trial_0001", Status: StatusPending, Params: map[string]any{"lr": 0.01}},
	}}
	var plain bytes.Buffer
	WriteTable(&plain, st, "loss")
	want := "== sweep: 2 trials (1 RUNNING, 1 PENDING)\n" +
		"trial       status   lr    iter  total time (s)  loss\n" +
		"trial_0000  RUNNING  0.1   3     12.346          0.5\n" +
		"trial_0001  PENDING  0.01  0     -               -\n"
	must.Eq(t, want, plain.String())
	var f frames
	WriteTable(&f, st, "loss")
	WriteTable(&f, st, "loss")
	must.Eq(t, []string{want, want}, f.got)
	must.Eq(t, "", f.String(), must.Sprint("nothing written as output"))
}
