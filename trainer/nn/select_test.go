package nn

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/shoenig/test/must"
)

// selectable returns the backends NewBackend can make here, skipping
// openblas with a message where the library is missing.
func selectable(t *testing.T) map[string]Backend {
	t.Helper()
	out := map[string]Backend{}
	for _, name := range []string{"gonum", "parallel:3", "openblas"} {
		be, release, err := NewBackend(name)
		if errors.Is(err, ErrBackendUnavailable) {
			t.Logf("skipping %s: %v", name, err)
			continue
		}
		must.NoError(t, err)
		t.Cleanup(release)
		out[name] = be
	}
	return out
}

// Every selectable backend computes the same products as gonum, within
// float32 rounding, for every transpose combination, padded strides, beta
// 0 and 1, and the empty cases.
func TestSelectableBackendsAgreeWithGonum(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	shapes := [][3]int{{1, 1, 1}, {7, 5, 3}, {130, 70, 90}, {3, 4, 0}, {0, 4, 3}}
	for name, be := range selectable(t) {
		for _, sh := range shapes {
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					for _, beta := range []float32{0, 1} {
						m, n, k := sh[0], sh[1], sh[2]
						t.Run(fmt.Sprintf("%s/%dx%dx%d/tA=%v/tB=%v/beta=%v", name, m, n, k, tA, tB, beta), func(t *testing.T) {
							ar, ac := m, k
							if tA {
								ar, ac = k, m
							}
							br, bc := k, n
							if tB {
								br, bc = n, k
							}
							lda, ldb, ldc := ac+2, bc+1, n+3
							a, b := randSlice(rng, ar*lda), randSlice(rng, br*ldb)
							c := randSlice(rng, m*ldc)
							want := append([]float32(nil), c...)
							Gonum{}.Sgemm(tA, tB, m, n, k, 0.5, a, lda, b, ldb, beta, want, ldc)
							be.Sgemm(tA, tB, m, n, k, 0.5, a, lda, b, ldb, beta, c, ldc)
							for i := range c {
								if d := math.Abs(float64(c[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
									t.Fatalf("element %d: got %v, gonum %v", i, c[i], want[i])
								}
							}
						})
					}
				}
			}
		}
	}
}

// Names select backends; bad names fail with a message, never a fallback.
func TestBackendFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want string
		err  bool
	}{
		{"", "nn.Gonum", false},
		{"gonum", "nn.Gonum", false},
		{"Parallel:4", "parallel(4)", false},
		{"parallel:0", "", true},
		{"openblas:0", "", true},
		{"openblas:x", "", true},
		{"mkl", "", true},
	} {
		t.Run(tc.env, func(t *testing.T) {
			be, release, err := BackendFromEnv(func(k string) string {
				must.Eq(t, BackendEnv, k)
				return tc.env
			})
			defer release()
			if tc.err {
				must.ErrorContains(t, err, BackendEnv)
				return
			}
			must.NoError(t, err)
			got := fmt.Sprintf("%T", be)
			if s, ok := be.(fmt.Stringer); ok {
				got = s.String()
			}
			must.Eq(t, tc.want, got)
		})
	}
}

// openblas:N sets the number of OpenBLAS threads (for the process).
func TestOpenBLASThreads(t *testing.T) {
	be, _, err := NewBackend("openblas")
	if errors.Is(err, ErrBackendUnavailable) {
		t.Skipf("no openblas: %v", err)
	}
	must.NoError(t, err)
	ob, ok := be.(interface{ Threads() int })
	must.True(t, ok)
	orig := ob.Threads()
	if orig == 0 {
		t.Skip("this OpenBLAS does not report its threads")
	}
	t.Cleanup(func() {
		_, _, err := NewBackend(fmt.Sprintf("openblas:%d", orig))
		must.NoError(t, err)
	})
	for _, n := range []int{1, 3} {
		be, _, err := NewBackend(fmt.Sprintf("OpenBLAS:%d", n))
		must.NoError(t, err)
		must.Eq(t, fmt.Sprintf("openblas(%d)", n), be.(fmt.Stringer).String())
		must.Eq(t, n, ob.Threads())
	}
}

// SaveDir and LoadDir round-trip parameters, optimizer state and meta.
func TestSaveLoadDir(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	m := NewSequential(rng, NewLinear(3, 2))
	opt := NewAdam(m.Params(), m.Grads(), AdamConfig{LR: 0.1})
	copy(m.Grads(), []float32{1, 2, 3, 4, 5, 6, 7, 8})
	opt.Step()
	must.NoError(t, SaveDir(dir, m, opt, map[string]int{"epoch": 4}))
	m2 := NewSequential(nil, NewLinear(3, 2))
	opt2 := NewAdam(m2.Params(), m2.Grads(), AdamConfig{LR: 0.1})
	var meta map[string]int
	must.NoError(t, LoadDir(dir, m2, opt2, &meta))
	must.Eq(t, 4, meta["epoch"])
	must.Eq(t, m.Params(), m2.Params())
	must.Eq(t, opt.State(), opt2.State())
	must.Error(t, LoadDir(t.TempDir(), m2, opt2, &meta))
}

// Workers sharing a machine split its CPUs between their threaded
// backends unless the count is explicit.
func TestWorkerBackendFromEnv(t *testing.T) {
	share := max(1, runtime.NumCPU()/4)
	for _, tc := range []struct {
		env   string
		local int
		want  string
	}{
		{"", 4, "nn.Gonum"},
		{"parallel", 1, "parallel(2)"},
		{"parallel", 4, fmt.Sprintf("parallel(%d)", share)},
		{"parallel:3", 4, "parallel(3)"},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.env, tc.local), func(t *testing.T) {
			be, release, err := WorkerBackendFromEnv(func(string) string { return tc.env }, tc.local)
			must.NoError(t, err)
			defer release()
			got := fmt.Sprintf("%T", be)
			if s, ok := be.(fmt.Stringer); ok {
				got = s.String()
			}
			must.Eq(t, tc.want, got)
		})
	}
}
