//go:build cgo && amd64

package nn

import (
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

// The baseline SSE2 Adam kernel, which machines without AVX run, gives the
// Go loop's results bit for bit too.
func TestAdamSSEMatchesGoLoop(t *testing.T) {
	c := kernelCases()[0]
	must.Eq(t, "adam", c.name)
	for _, n := range []int{1, 4, 5, 1027} {
		rng := rand.New(rand.NewPCG(uint64(n), 5))
		p1 := randSlice(rng, n)
		p2 := append([]float32(nil), p1...)
		st1 := [][]float32{make([]float32, n), make([]float32, n)}
		st2 := [][]float32{make([]float32, n), make([]float32, n)}
		for step := 0; step < 3; step++ {
			g := randSlice(rng, n)
			c.goLoop(p1, g, st1)
			adamSSE(p2, g, st2[0], st2[1], testAdamCoef)
		}
		must.Eq(t, p1, p2)
		must.Eq(t, st1, st2)
	}
}
