package nn

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// benchBackends are the backends every benchmark runs on; OpenBLAS joins
// where the library loads.
func benchBackends(b *testing.B) map[string]Backend {
	par := NewParallel(runtime.GOMAXPROCS(0))
	b.Cleanup(par.Close)
	bes := map[string]Backend{"gonum": Gonum{}, "parallel": par}
	if ob, _, err := NewBackend("openblas"); err == nil {
		bes["openblas"] = ob
	} else {
		b.Logf("openblas left out: %v", err)
	}
	return bes
}

// gemmRate times reps square n×n products on be and returns GFLOP/s.
func gemmRate(be Backend, n, reps int) float64 {
	rng := rand.New(rand.NewPCG(1, 1))
	a, bm, c := randSlice(rng, n*n), randSlice(rng, n*n), make([]float32, n*n)
	be.Sgemm(false, false, n, n, n, 1, a, n, bm, n, 0, c, n) // warm
	start := time.Now()
	for i := 0; i < reps; i++ {
		be.Sgemm(false, false, n, n, n, 1, a, n, bm, n, 0, c, n)
	}
	return 2 * float64(n*n*n) * float64(reps) / time.Since(start).Seconds() / 1e9
}

// BenchmarkSgemm reports each backend's square Sgemm rate in GFLOP/s.
func BenchmarkSgemm(b *testing.B) {
	for name, be := range benchBackends(b) {
		for _, n := range []int{256, 512, 1024} {
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 1))
				a, bm, c := randSlice(rng, n*n), randSlice(rng, n*n), make([]float32, n*n)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					be.Sgemm(false, false, n, n, n, 1, a, n, bm, n, 0, c, n)
				}
				b.ReportMetric(2*float64(n*n*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkMLPStep times a full training step (forward, cross-entropy,
// backward, Adam) of a 784-512-512-10 ReLU MLP on batches of 128, and
// reports the GEMM GFLOP/s the step achieves, the 512² Sgemm rate of the
// same backend measured in the same run, and their ratio (mlp/gemm: how
// much of the backend's matmul speed a training step keeps).
func BenchmarkMLPStep(b *testing.B) {
	const batch = 128
	sizes := []int{784, 512, 512, 10}
	flops := 0.0
	for i := 0; i+1 < len(sizes); i++ {
		// Forward, dW and dX: three products of batch×in×out each, except
		// that BackwardParams skips the first layer's dX.
		products := 3.0
		if i == 0 {
			products = 2
		}
		flops += 2 * products * float64(batch*sizes[i]*sizes[i+1])
	}
	for name, be := range benchBackends(b) {
		b.Run(name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(2, 2))
			m := NewSequential(rng, &Linear{In: 784, Out: 512, Scheme: InitKaiming}, NewReLU(),
				&Linear{In: 512, Out: 512, Scheme: InitKaiming}, NewReLU(), NewLinear(512, 10))
			m.SetBackend(be)
			opt := NewAdam(m.Params(), m.Grads(), AdamConfig{LR: 1e-3})
			x := randomInput(rng, batch, 784, 0)
			labels := make([]int, batch)
			for i := range labels {
				labels[i] = rng.IntN(10)
			}
			step := stepper(m, opt, x, crossEntropyTo(labels))
			// The reference is timed before and after the steps and averaged,
			// so a change in machine load during the run skews both alike.
			before := gemmRate(be, 512, 3)
			step()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step()
			}
			b.StopTimer()
			mlp := flops * float64(b.N) / b.Elapsed().Seconds() / 1e9
			gemm := (before + gemmRate(be, 512, 3)) / 2
			b.ReportMetric(mlp, "GFLOP/s")
			b.ReportMetric(gemm, "gemm-GFLOP/s")
			b.ReportMetric(mlp/gemm, "mlp/gemm")
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "examples/s")
		})
	}
}
