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

// gemmRate times reps square n×n products on be and returns their mean
// GFLOP/s and that of the fastest one.
func gemmRate(be Backend, n, reps int) (mean, best float64) {
	rng := rand.New(rand.NewPCG(1, 1))
	a, bm, c := randSlice(rng, n*n), randSlice(rng, n*n), make([]float32, n*n)
	be.Sgemm(false, false, n, n, n, 1, a, n, bm, n, 0, c, n) // warm
	var total, fastest time.Duration
	for i := 0; i < reps; i++ {
		start := time.Now()
		be.Sgemm(false, false, n, n, n, 1, a, n, bm, n, 0, c, n)
		d := time.Since(start)
		total += d
		if i == 0 || d < fastest {
			fastest = d
		}
	}
	flops := 2 * float64(n*n*n)
	return flops * float64(reps) / total.Seconds() / 1e9, flops / fastest.Seconds() / 1e9
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

// benchStep sets m's backend to be and returns one training step with
// Adam on a fixed random batch of batch rows of inputs values, labelled
// among 10 classes.
func benchStep(m *Sequential, be Backend, rng *rand.Rand, batch, inputs int) func() {
	m.SetBackend(be)
	opt := NewAdam(m.Params(), m.Grads(), AdamConfig{LR: 1e-3})
	x := randomInput(rng, batch, inputs, 0)
	labels := make([]int, batch)
	for i := range labels {
		labels[i] = rng.IntN(10)
	}
	return stepper(m, opt, x, crossEntropyTo(labels))
}

// timeSteps runs step once to warm up, then b.N times with the timer on,
// and reports flops (per step) as GFLOP/s and the examples per second. It
// returns the mean GFLOP/s and that of the fastest step.
func timeSteps(b *testing.B, step func(), flops float64, batch int) (mean, best float64) {
	step()
	var fastest time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		step()
		if d := time.Since(start); i == 0 || d < fastest {
			fastest = d
		}
	}
	b.StopTimer()
	mean = flops * float64(b.N) / b.Elapsed().Seconds() / 1e9
	b.ReportMetric(mean, "GFLOP/s")
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "examples/s")
	return mean, flops / fastest.Seconds() / 1e9
}

// BenchmarkMLPStep times a full training step (forward, cross-entropy,
// backward, Adam) of a 784-512-512-10 ReLU MLP on batches of 128 (the
// headline; "-b256" lines use batches of 256), and reports the GEMM GFLOP/s
// the step achieves, the 512² Sgemm rate of the same backend measured in
// the same run, and their ratio (mlp/gemm: how much of the backend's
// matmul speed a training step keeps). best-mlp/gemm is the same ratio of
// the fastest step to the fastest reference product: on a shared machine
// it estimates what an idle one would show, where the means mix in
// however much CPU the other tenants left.
func BenchmarkMLPStep(b *testing.B) {
	sizes := []int{784, 512, 512, 10}
	flops := func(batch int) float64 {
		f := 0.0
		for i := 0; i+1 < len(sizes); i++ {
			// Forward, dW and dX: three products of batch×in×out each, except
			// that BackwardParams skips the first layer's dX.
			products := 3.0
			if i == 0 {
				products = 2
			}
			f += 2 * products * float64(batch*sizes[i]*sizes[i+1])
		}
		return f
	}
	for name, be := range benchBackends(b) {
		for _, batch := range []int{128, 256} {
			sub := name
			if batch != 128 {
				sub = fmt.Sprintf("%s-b%d", name, batch)
			}
			b.Run(sub, func(b *testing.B) {
				rng := rand.New(rand.NewPCG(2, 2))
				m := NewSequential(rng, &Linear{In: 784, Out: 512, Scheme: InitKaiming}, NewReLU(),
					&Linear{In: 512, Out: 512, Scheme: InitKaiming}, NewReLU(), NewLinear(512, 10))
				step := benchStep(m, be, rng, batch, 784)
				// The reference is timed before and after the steps and
				// averaged, so a change in machine load during the run skews
				// both alike.
				before, bestBefore := gemmRate(be, 512, 8)
				mlp, bestMLP := timeSteps(b, step, flops(batch), batch)
				after, bestAfter := gemmRate(be, 512, 8)
				gemm := (before + after) / 2
				b.ReportMetric(gemm, "gemm-GFLOP/s")
				b.ReportMetric(mlp/gemm, "mlp/gemm")
				b.ReportMetric(bestMLP/max(bestBefore, bestAfter), "best-mlp/gemm")
			})
		}
	}
}

// BenchmarkCNNStep times a training step of the mnist-cnn model (two 5×5
// convolutions with 8 and 16 channels, ReLU, 2×2 pooling, Linear(784,10),
// Adam) on batches of 64 and reports the GEMM GFLOP/s it achieves (its
// convolutions' and Linear's products) and examples/s.
func BenchmarkCNNStep(b *testing.B) {
	const batch = 64
	layers := func() (c1 *Conv2D, p1 *MaxPool2D, c2 *Conv2D, p2 *MaxPool2D) {
		c1 = &Conv2D{In: Shape{28, 28, 1}, Out: 8, K: 5, Pad: 2, Scheme: InitKaiming}
		p1 = NewMaxPool2D(c1.OutShape(), 2)
		c2 = &Conv2D{In: p1.OutShape(), Out: 16, K: 5, Pad: 2, Scheme: InitKaiming}
		return c1, p1, c2, NewMaxPool2D(c2.OutShape(), 2)
	}
	c1, _, c2, p2 := layers()
	// Forward and dW for every layer, dX for all but the first.
	conv := func(c *Conv2D, products float64) float64 {
		os := c.OutShape()
		return 2 * products * float64(batch*os.H*os.W*c.Out*c.patch())
	}
	flops := conv(c1, 2) + conv(c2, 3) + 2*3*float64(batch*p2.OutShape().Size()*10)
	for name, be := range benchBackends(b) {
		b.Run(name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 3))
			c1, p1, c2, p2 := layers()
			m := NewSequential(rng, c1, NewReLU(), p1, c2, NewReLU(), p2, NewFlatten(p2.OutShape()), NewLinear(p2.OutShape().Size(), 10))
			timeSteps(b, benchStep(m, be, rng, batch, 784), flops, batch)
		})
	}
}
