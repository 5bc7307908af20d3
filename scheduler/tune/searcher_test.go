package tune

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// runSearchScript feeds a searcher the scripted calls of a
// testdata/*.search file and returns the transcript: every suggestion with
// its params.
//
//	searcher <type> metric=<m> mode=<min|max> seed=<n> samples=<n> [settings JSON]
//	space <space JSON>
//	suggest <trial>
//	result <trial> <time> <value>
//	complete <trial> [pruned|failed]
//	auto <n> <objective>     suggest n trials, each completed with the objective's value
func runSearchScript(t *testing.T, path string) (kind, transcript string) {
	t.Helper()
	f, err := os.Open(path)
	must.NoError(t, err)
	defer f.Close()
	var (
		out    strings.Builder
		s      Searcher
		head   []string
		space  map[string]any
		last   = map[string]Result{}
		params = map[string]map[string]any{}
		n      int
	)
	suggest := func(id string) {
		if s == nil {
			settings, err := ParseSearcher(head[1], []byte(head[5]), strings.TrimPrefix(head[2], "metric="))
			must.NoError(t, err)
			seed, _ := strconv.ParseUint(strings.TrimPrefix(head[4], "seed="), 10, 64)
			s, err = settings.Build(space, Objective{Metric: strings.TrimPrefix(head[2], "metric="), Mode: strings.TrimPrefix(head[3], "mode=")}, n, seed)
			must.NoError(t, err)
		}
		v, ok := s.Suggest(id)
		if !ok {
			fmt.Fprintf(&out, "suggest %s -> none\n", id)
			return
		}
		params[id] = v.Params
		fmt.Fprintf(&out, "suggest %s -> %s\n", id, formatParams(v.Params))
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		switch fs[0] {
		case "searcher":
			fs = strings.SplitN(line, " ", 7)
			must.SliceLen(t, 7, fs, must.Sprintf("%s:%d: want searcher <type> metric= mode= seed= samples= {settings}", path, ln))
			n, err = strconv.Atoi(strings.TrimPrefix(fs[5], "samples="))
			must.NoError(t, err)
			head = []string{fs[0], fs[1], fs[2], fs[3], fs[4], fs[6]}
			kind = fs[1]
		case "space":
			space, err = ParseSpace([]byte(strings.TrimPrefix(line, "space ")))
			must.NoError(t, err, must.Sprintf("%s:%d", path, ln))
		case "suggest":
			suggest(fs[1])
		case "result":
			tm, _ := strconv.ParseFloat(fs[2], 64)
			v, _ := strconv.ParseFloat(fs[3], 64)
			r := Result{Trial: fs[1], Time: tm, Value: v}
			last[fs[1]] = r
			s.OnResult(fs[1], r)
			fmt.Fprintf(&out, "%s\n", line)
		case "complete":
			o := Outcome{Last: last[fs[1]], Pruned: len(fs) > 2 && fs[2] == "pruned", Failed: len(fs) > 2 && fs[2] == "failed"}
			s.OnTrialComplete(fs[1], o)
			fmt.Fprintf(&out, "%s\n", line)
		case "auto":
			count, _ := strconv.Atoi(fs[1])
			for range count {
				id := fmt.Sprintf("trial_%04d", len(params))
				suggest(id)
				if params[id] == nil {
					break
				}
				r := Result{Trial: id, Time: 1, Value: scriptObjective(t, fs[2], params[id])}
				s.OnResult(id, r)
				s.OnTrialComplete(id, Outcome{Last: r})
				fmt.Fprintf(&out, "  %s = %.6g\n", fs[2], r.Value)
			}
		default:
			t.Fatalf("%s:%d: unknown command %q", path, ln, fs[0])
		}
	}
	must.NoError(t, sc.Err())
	return kind, out.String()
}

// scriptObjective is an analytic objective of a trial's params.
func scriptObjective(t *testing.T, name string, p map[string]any) float64 {
	num := func(k string) float64 {
		f, ok := toFloat(p[k])
		must.True(t, ok, must.Sprintf("param %s is %v", k, p[k]))
		return f
	}
	switch name {
	case "branin":
		return branin(num("x1"), num("x2"))
	case "quad": // every numeric param's distance from 1, plus 1 for a choice other than the first
		v := 0.0
		for _, x := range p {
			if f, ok := toFloat(x); ok {
				v += (f - 1) * (f - 1)
			} else if s, ok := x.(string); ok && !strings.HasSuffix(s, "0") {
				v++
			}
		}
		return v
	}
	t.Fatalf("unknown objective %q", name)
	return 0
}

// branin is the Branin-Hoo function on x1 in [-5, 10], x2 in [0, 15];
// its minimum is 0.397887.
func branin(x1, x2 float64) float64 {
	const (
		a = 1.0
		b = 5.1 / (4 * math.Pi * math.Pi)
		c = 5 / math.Pi
		r = 6.0
		s = 10.0
		t = 1 / (8 * math.Pi)
	)
	return a*math.Pow(x2-b*x1*x1+c*x1-r, 2) + s*(1-t)*math.Cos(x1) + s
}

// formatParams writes params sorted by name, floats to 6 digits.
func formatParams(p map[string]any) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		v := p[k]
		if f, ok := v.(float64); ok {
			parts[i] = fmt.Sprintf("%s=%.6g", k, f)
			continue
		}
		js, _ := json.Marshal(v)
		parts[i] = fmt.Sprintf("%s=%s", k, js)
	}
	return strings.Join(parts, " ")
}

// TestSearcherTranscripts runs every testdata/*.search script against the
// searcher its first line builds through the registry, and checks the
// golden transcript; a second run must agree (deterministic for a seed).
// Every registered searcher needs a script.
func TestSearcherTranscripts(t *testing.T) {
	scripts, err := filepath.Glob(filepath.Join("testdata", "*.search"))
	must.NoError(t, err)
	covered := map[string]bool{}
	for _, path := range scripts {
		name := strings.TrimSuffix(filepath.Base(path), ".search")
		t.Run(name, func(t *testing.T) {
			kind, got := runSearchScript(t, path)
			covered[kind] = true
			checkGolden(t, name+".search", got)
			_, again := runSearchScript(t, path)
			must.EqOp(t, got, again)
		})
	}
	for _, kind := range SearcherKinds() {
		must.True(t, covered[kind], must.Sprintf("searcher %q has no transcript in testdata", kind))
	}
}

// A concurrency limit holds suggestions back until a trial completes.
func TestSearcherLimit(t *testing.T) {
	settings, err := ParseSearcher("tpe", []byte(`{"max_concurrent": 2}`), "loss")
	must.NoError(t, err)
	s, err := settings.Build(map[string]any{"x": Uniform(0, 1)}, Objective{Metric: "loss", Mode: ModeMin}, 10, 1)
	must.NoError(t, err)
	_, ok := s.Suggest("a")
	must.True(t, ok)
	_, ok = s.Suggest("b")
	must.True(t, ok)
	_, ok = s.Suggest("c")
	must.False(t, ok)
	s.OnTrialComplete("a", Outcome{Last: Result{Trial: "a", Value: 1}})
	_, ok = s.Suggest("c")
	must.True(t, ok)
}

// Searcher settings are checked where train.hcl gives them.
func TestParseSearcher(t *testing.T) {
	for _, tc := range []struct{ kind, settings, metric, key string }{
		{"tpe", `{"n_startup":3}`, "loss", "n_startup"},
		{"tpe", `{"n_ei_candidates":-1}`, "loss", "n_ei_candidates"},
		{"tpe", `{"prior_weight":-1}`, "loss", "prior_weight"},
		{"bohb", `{"bandwidth_factor":-3}`, "loss", "bandwidth_factor"},
		{"bohb", `{"min_bandwidth":1}`, "loss", "min_bandwidth"},
		{"tpe", ``, "", ""},
		{"random", `{"x":1}`, "", "x"},
		{"optuna", ``, "loss", "type"},
	} {
		t.Run(tc.kind+tc.settings, func(t *testing.T) {
			_, err := ParseSearcher(tc.kind, []byte(tc.settings), tc.metric)
			must.Error(t, err)
			var se *SettingError
			must.True(t, errors.As(err, &se), must.Sprint(err))
			must.EqOp(t, tc.key, se.Key)
		})
	}
}

// TPE's median regret on Branin after 50 trials, over 20 fixed seeds, is
// under half of random search's (deterministic: no clock).
func TestTPEBeatsRandom(t *testing.T) {
	space := map[string]any{"x1": Uniform(-5, 10), "x2": Uniform(0, 15)}
	var tpe, rnd []float64
	for seed := uint64(1); seed <= 20; seed++ {
		tpe = append(tpe, bestOf(t, TPESettings{}, space, 50, seed))
		rnd = append(rnd, bestOf(t, VariantSettings{}, space, 50, seed))
	}
	sort.Float64s(tpe)
	sort.Float64s(rnd)
	const opt = 0.397887
	median := func(x []float64) float64 { return (x[9]+x[10])/2 - opt }
	must.Less(t, 0.5*median(rnd), median(tpe), must.Sprintf("tpe %v random %v", tpe, rnd))
}

func bestOf(t *testing.T, s SearcherSettings, space map[string]any, n int, seed uint64) float64 {
	srch, err := s.Build(space, Objective{Metric: "loss", Mode: ModeMin}, n, seed)
	must.NoError(t, err)
	best := math.Inf(1)
	for i := range n {
		id := fmt.Sprint(i)
		v, ok := srch.Suggest(id)
		must.True(t, ok)
		x1, _ := toFloat(v.Params["x1"])
		x2, _ := toFloat(v.Params["x2"])
		r := Result{Trial: id, Time: 1, Value: branin(x1, x2)}
		srch.OnTrialComplete(id, Outcome{Last: r})
		best = math.Min(best, r.Value)
	}
	return best
}

// TPE and BOHB sample every value from their models, so they refuse a
// space with a grid_search (as Ray's OptunaSearch does) rather than run
// one value of it; the variant generator's searchers enumerate it.
func TestModelSearchersRefuseGridSearch(t *testing.T) {
	obj := Objective{Metric: "loss", Mode: ModeMin}
	for _, tc := range []struct {
		name     string
		settings SearcherSettings
		space    map[string]any
		want     string
	}{
		{"tpe", TPESettings{}, map[string]any{"lr": GridSearch(0.1, 0.01), "m": Uniform(0, 1)}, "lr: grid_search needs"},
		{"bohb", BOHBSettings{}, map[string]any{"opt": map[string]any{"lr": GridSearch(0.1, 0.01)}}, "opt/lr: grid_search needs"},
		{"tpe, nested in a choice", TPESettings{}, map[string]any{"o": Choice("sgd", map[string]any{"lr": GridSearch(1, 2)})}, "o/1/lr: "},
		{"tpe without a grid", TPESettings{}, map[string]any{"lr": Choice(0.1, 0.01)}, ""},
		{"random", VariantSettings{kind: SearchRandom}, map[string]any{"lr": GridSearch(0.1, 0.01)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.settings.Build(tc.space, obj, 4, 1)
			if tc.want == "" {
				must.NoError(t, err)
				return
			}
			must.ErrorIs(t, err, ErrGridSearch)
			must.StrHasPrefix(t, tc.want, err.Error())
		})
	}
	must.ErrorIs(t, CheckGridSearch("tpe"), ErrGridSearch)
	must.NoError(t, CheckGridSearch("grid"))
}
