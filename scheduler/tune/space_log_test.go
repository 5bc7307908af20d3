package tune

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

// lograndint(lo, hi) draws integers in [lo, hi) log-uniformly (each decade
// as often as the next); qlograndint(lo, hi, q) multiples of q in
// [lo, hi]. Both keep their JSON form, and TPE and BOHB suggest values of
// them from their models.
func TestLogRandInt(t *testing.T) {
	space, err := ParseSpace([]byte(`{"width": {"lograndint": [1, 1000]}, "batch": {"qlograndint": [16, 1024, 16]}}`))
	must.NoError(t, err)
	b, err := json.Marshal(space)
	must.NoError(t, err)
	must.EqOp(t, `{"batch":{"qlograndint":[16,1024,16]},"width":{"lograndint":[1,1000]}}`, string(b))

	r := rand.New(rand.NewPCG(1, 2))
	decades := [3]int{}
	for range 30000 {
		w := space["width"].(Domain).Sample(r).(int)
		must.True(t, w >= 1 && w < 1000, must.Sprint(w))
		decades[int(math.Log10(float64(w)))]++
		q := space["batch"].(Domain).Sample(r).(int)
		must.True(t, q >= 16 && q <= 1024 && q%16 == 0, must.Sprint(q))
	}
	for _, n := range decades { // 1-9, 10-99, 100-999: a third each
		must.Between(t, 9000, n, 11000)
	}

	for _, settings := range []SearcherSettings{TPESettings{NStartupTrials: 2}, BOHBSettings{RandomFraction: -1}} {
		s, err := settings.Build(space, Objective{Metric: "loss", Mode: ModeMin}, 12, 1)
		must.NoError(t, err)
		for i := range 12 {
			id := string(rune('a' + i))
			v, ok := s.Suggest(id)
			must.True(t, ok)
			w, q := v.Config["width"].(int), v.Config["batch"].(int)
			must.True(t, w >= 1 && w < 1000 && q >= 16 && q <= 1024 && q%16 == 0, must.Sprint(settings.Kind(), v.Config))
			s.OnResult(id, Result{Trial: id, Time: 1, Value: math.Abs(math.Log(float64(w)) - 3)})
			s.OnTrialComplete(id, Outcome{Last: Result{Trial: id, Time: 1, Value: math.Abs(math.Log(float64(w)) - 3)}})
		}
	}

	for _, bad := range []string{`{"lograndint": [0, 10]}`, `{"lograndint": [1.5, 10]}`, `{"qlograndint": [1, 10, 0]}`, `{"lograndint": [10, 1]}`} {
		_, err := ParseSpace([]byte(`{"x": ` + bad + `}`))
		must.ErrorIs(t, err, ErrSpace, must.Sprint(bad))
	}
}
