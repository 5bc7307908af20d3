package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// naiveGemm is the float64 triple loop every Backend is compared with.
func naiveGemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float32 {
	out := append([]float32(nil), c...)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				ai, bi := i*lda+p, p*ldb+j
				if tA {
					ai = p*lda + i
				}
				if tB {
					bi = j*ldb + p
				}
				av, bv := a[ai], b[bi]
				s += float64(av) * float64(bv)
			}
			out[i*ldc+j] = float32(float64(alpha)*s + float64(beta)*float64(c[i*ldc+j]))
		}
	}
	return out
}

func randSlice(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// TestBackendsAgree checks every backend against naiveGemm for all
// transpose combinations, shapes that do and do not divide the tile size,
// empty dimensions and padded strides.
func TestBackendsAgree(t *testing.T) {
	par1, par3 := NewParallel(1), NewParallel(3)
	t.Cleanup(par1.Close)
	t.Cleanup(par3.Close)
	backends := map[string]Backend{"gonum": Gonum{}, "parallel1": par1, "parallel3": par3}
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := [][3]int{{1, 1, 1}, {3, 5, 7}, {64, 64, 64}, {130, 70, 65}, {200, 3, 129}, {2, 300, 50}, {0, 4, 4}, {4, 0, 4}, {4, 4, 0}}
	for name, be := range backends {
		for _, sh := range shapes {
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					m, n, k := sh[0], sh[1], sh[2]
					t.Run(fmt.Sprintf("%s/%dx%dx%d/tA=%v/tB=%v", name, m, n, k, tA, tB), func(t *testing.T) {
						// Strides one wider than needed catch offset mistakes.
						ar, ac := m, k
						if tA {
							ar, ac = k, m
						}
						br, bc := k, n
						if tB {
							br, bc = n, k
						}
						lda, ldb, ldc := ac+1, bc+1, n+1
						a := randSlice(rng, max(ar*lda, 1))
						b := randSlice(rng, max(br*ldb, 1))
						c := randSlice(rng, max(m*ldc, 1))
						want := naiveGemm(tA, tB, m, n, k, 0.5, a, lda, b, ldb, 2, c, ldc)
						be.Sgemm(tA, tB, m, n, k, 0.5, a, lda, b, ldb, 2, c, ldc)
						for i := range want {
							if d := math.Abs(float64(want[i] - c[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
								t.Fatalf("element %d: got %v want %v", i, c[i], want[i])
							}
						}
					})
				}
			}
		}
	}
}

// TestParallelLargeStepDoesNotAllocate covers products above gonum's
// parallel threshold, where only Parallel stays allocation-free.
func TestParallelLargeStepDoesNotAllocate(t *testing.T) {
	par := NewParallel(4)
	t.Cleanup(par.Close)
	rng := rand.New(rand.NewPCG(3, 4))
	m := NewSequential(rng, NewLinear(100, 256), NewReLU(), NewLinear(256, 10))
	m.SetBackend(par)
	opt := NewAdam(m.Params(), m.Grads(), AdamConfig{LR: 1e-3})
	x := randomInput(rng, 200, 100, 0)
	assertNoAllocs(t, stepper(m, opt, x, mseTo(NewMatrix(200, 10))))
}

// Close stops the workers. A worker that has told Close it is done may
// still be on its way out for a moment, as may an earlier test's, so the
// count is read once it has settled.
func TestParallelCloseStopsWorkers(t *testing.T) {
	before := settledGoroutines(t)
	p := NewParallel(5)
	must.Eq(t, 5, p.Workers())
	must.Eq(t, before+4, runtime.NumGoroutine())
	p.Close()
	p.Close() // idempotent
	must.Eq(t, before, settledGoroutines(t))
}

// settledGoroutines returns the number of goroutines once it has not
// changed for 20 ms.
func settledGoroutines(t *testing.T) int {
	t.Helper()
	n, since, deadline := runtime.NumGoroutine(), time.Now(), time.Now().Add(10*time.Second)
	for time.Since(since) < 20*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("the number of goroutines never settled (now %d)", n)
		}
		time.Sleep(time.Millisecond)
		if m := runtime.NumGoroutine(); m != n {
			n, since = m, time.Now()
		}
	}
	return n
}
