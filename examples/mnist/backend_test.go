package mnist_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/examples/mnist"
	"github.com/nomad-train/nomad-train/trainer/nn"
)

// backends returns every backend nn.NewBackend can make here, by name;
// openblas is left out, with a message, where the library is missing.
func backends(tb testing.TB) map[string]nn.Backend {
	tb.Helper()
	out := map[string]nn.Backend{}
	for _, name := range []string{"gonum", "parallel:2", "openblas"} {
		be, release, err := nn.NewBackend(name)
		if errors.Is(err, nn.ErrBackendUnavailable) {
			tb.Logf("leaving out %s: %v", name, err)
			continue
		}
		must.NoError(tb, err)
		tb.Cleanup(release)
		out[name] = be
	}
	return out
}

// The same training (model, seed, data order, optimizer) on every backend
// gives the same loss curve within float32 tolerance: the backends differ
// only in the order they add products.
func TestBackendsGiveSameLossCurve(t *testing.T) {
	train, _ := sets(t)
	cfg := mnist.DefaultConfig()
	cfg.Epochs = 1
	const steps = 30
	var ref []float64
	bes := backends(t)
	for _, name := range []string{"gonum", "parallel:2", "openblas"} {
		be, ok := bes[name]
		if !ok {
			continue
		}
		losses, _ := trainLocal(t, cfg, be, train, steps, nil)
		must.Len(t, steps, losses)
		if ref == nil {
			ref = losses
			must.Less(t, losses[0]*0.7, losses[steps-1]) // it learns
			continue
		}
		for i := range losses {
			if d := math.Abs(losses[i] - ref[i]); d > 1e-4*(1+ref[i]) {
				t.Fatalf("%s step %d: loss %.7f, gonum %.7f", name, i, losses[i], ref[i])
			}
		}
		t.Logf("%s: %d steps within 1e-4 of gonum (last %.6f vs %.6f)", name, steps, losses[steps-1], ref[steps-1])
	}
}

// gemmGFLOPS measures be on a 1024² float32 product, the reference of B9.
func gemmGFLOPS(be nn.Backend) float64 {
	const n = 1024
	a, b, c := make([]float32, n*n), make([]float32, n*n), make([]float32, n*n)
	for i := range a {
		a[i], b[i] = float32(i%7)-3, float32(i%5)-2
	}
	be.Sgemm(false, false, n, n, n, 1, a, n, b, n, 0, c, n) // warm up
	reps := 0
	start := time.Now()
	for time.Since(start) < 300*time.Millisecond || reps < 2 {
		be.Sgemm(false, false, n, n, n, 1, a, n, b, n, 0, c, n)
		reps++
	}
	return 2 * n * n * n * float64(reps) / time.Since(start).Seconds() / 1e9
}

// mlpFlops is the multiply-adds ×2 of one training step of the MLP on a
// batch: forward of both layers, weight gradients of both, and the input
// gradient of the second (the first layer skips its own).
func mlpFlops(batch, hidden int) float64 {
	l1, l2 := float64(mnist.Pixels*hidden), float64(hidden*mnist.Classes)
	return 2 * float64(batch) * (2*l1 + 3*l2)
}

// BenchmarkB9 is benchmark B9: the GFLOP/s the MLP's training step
// achieves (decode, forward, backward, Adam step) over the GFLOP/s of a
// 1024² GEMM on the same backend, measured in the same run. Goal: ≥ 0.6.
func BenchmarkB9(b *testing.B) {
	train, _ := sets(b)
	recs := make([][]byte, 0, 1024)
	for i := 0; i < 1024; i++ {
		r, err := train.Record(i, nil)
		must.NoError(b, err)
		recs = append(recs, r)
	}
	for name, be := range backends(b) {
		for _, batch := range []int{64, 256, 1024} {
			b.Run(fmt.Sprintf("%s/batch=%d", name, batch), func(b *testing.B) {
				cfg := mnist.DefaultConfig()
				m, err := mnist.NewModel(cfg)
				must.NoError(b, err)
				m.SetBackend(be)
				opt, err := mnist.NewOptimizer(cfg, m)
				must.NoError(b, err)
				var st mnist.Step
				st.Forward(m, recs[:batch])
				gemmBefore := gemmGFLOPS(be)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					st.Forward(m, recs[:batch])
					opt.Step()
				}
				b.StopTimer()
				gemm := (gemmBefore + gemmGFLOPS(be)) / 2
				mlp := mlpFlops(batch, cfg.Hidden) * float64(b.N) / b.Elapsed().Seconds() / 1e9
				b.ReportMetric(mlp, "GFLOP/s")
				b.ReportMetric(gemm, "gemm-GFLOP/s")
				b.ReportMetric(mlp/gemm, "mlp/gemm")
			})
		}
	}
}
