package tune

import (
	"errors"
	"testing"
)

// FuzzParseSpace reads param spaces as train.hcl hands them over: any that
// parses can be sampled by the variant generator and by TPE, past its
// start-up, without panicking.
func FuzzParseSpace(f *testing.F) {
	for _, seed := range []string{
		`{"lr": {"loguniform": [0.0001, 0.1]}, "batch_size": {"choice": [16, 32, 64]}, "epochs": 9}`,
		`{"layers": {"grid_search": [1, 2]}, "steps": {"quniform": [10, 100, 10]}, "seed": {"randint": [0, 1000]}}`,
		`{"a": {"qloguniform": [0.0001, 0.1, 0.0001]}, "b": {"qrandint": [16, 128, 16]}, "c": {"randn": [0, 1]}, "d": {"qrandn": [0, 1, 0.5]}}`,
		`{"w": {"lograndint": [1, 1000]}, "b": {"qlograndint": [16, 1024, 16]}}`,
		`{"opt": {"choice": ["sgd", {"name": "adam", "beta": {"uniform": [0.8, 0.99]}}]}, "m": {"uniform": [0, 1]}}`,
		`{"nested": {"x": [1, {"choice": [{"loguniform": [1, 2]}, 3]}]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		space, err := ParseSpace(data)
		if err != nil {
			return
		}
		g, err := NewGenerator(space, SearchRandom, 2, 1)
		if err != nil {
			return
		}
		for range g.Total() {
			g.Next()
		}
		s, err := TPESettings{NStartupTrials: 2}.Build(space, Objective{Metric: "loss", Mode: ModeMin}, 5, 1)
		if errors.Is(err, ErrGridSearch) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			id := string(rune('a' + i))
			if _, ok := s.Suggest(id); !ok {
				t.Fatalf("no suggestion %d", i)
			}
			s.OnTrialComplete(id, Outcome{Last: Result{Trial: id, Time: 1, Value: float64(i % 3)}})
		}
	})
}
