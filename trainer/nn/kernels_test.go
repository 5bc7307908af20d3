package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shoenig/test/must"
)

// kernelCase is one optimizer update run twice: by the Go loop of
// kernels.go and by the kernel the optimizers call (vectorised C where cgo
// and amd64 allow, the same Go loop elsewhere).
type kernelCase struct {
	name   string
	state  int // state buffers of the parameters' length
	goLoop func(p, g []float32, st [][]float32)
	kernel func(p, g []float32, st [][]float32)
}

// testAdamCoef is a third step's coefficients with weight decay.
var testAdamCoef = adamCoef{b1: 0.9, ob1: 0.1, b2: 0.999, ob2: 1 - 0.999, wd: 0.01, step: 1e-3 / 0.271, invSqrtBC2: 1 / float32(math.Sqrt(1-0.997)), eps: 1e-8}

func kernelCases() []kernelCase {
	c := testAdamCoef
	return []kernelCase{
		{"adam", 2,
			func(p, g []float32, st [][]float32) { adamGo(p, g, st[0], st[1], c) },
			func(p, g []float32, st [][]float32) { adamUpdate(p, g, st[0], st[1], c) }},
		{"sgd", 0,
			func(p, g []float32, _ [][]float32) { sgdGo(p, g, 0.1, 0.01) },
			func(p, g []float32, _ [][]float32) { sgdUpdate(p, g, 0.1, 0.01) }},
		{"sgd-momentum", 1,
			func(p, g []float32, st [][]float32) { sgdMomentumGo(p, g, st[0], 0.1, 0.9, 0.01, false) },
			func(p, g []float32, st [][]float32) { sgdMomentumUpdate(p, g, st[0], 0.1, 0.9, 0.01, false) }},
		{"sgd-nesterov", 1,
			func(p, g []float32, st [][]float32) { sgdMomentumGo(p, g, st[0], 0.1, 0.9, 0.01, true) },
			func(p, g []float32, st [][]float32) { sgdMomentumUpdate(p, g, st[0], 0.1, 0.9, 0.01, true) }},
	}
}

// The kernels the optimizers run give the Go loops' results bit for bit,
// over lengths around the vector widths and the cgo threshold, for three
// steps with fresh gradients.
func TestKernelsMatchGoLoops(t *testing.T) {
	for _, kc := range kernelCases() {
		for _, n := range []int{1, 7, 8, 9, cgoMinLen - 1, cgoMinLen, cgoMinLen + 13, 5003} {
			t.Run(fmt.Sprintf("%s/%d", kc.name, n), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(n), 3))
				p1 := randSlice(rng, n)
				p2 := append([]float32(nil), p1...)
				st1, st2 := make([][]float32, kc.state), make([][]float32, kc.state)
				for i := range st1 {
					st1[i], st2[i] = make([]float32, n), make([]float32, n)
				}
				for step := 0; step < 3; step++ {
					g := randSlice(rng, n)
					kc.goLoop(p1, g, st1)
					kc.kernel(p2, g, st2)
				}
				for i := range p1 {
					if math.Float32bits(p1[i]) != math.Float32bits(p2[i]) {
						t.Fatalf("param %d: Go %v, kernel %v", i, p1[i], p2[i])
					}
				}
				must.Eq(t, st1, st2)
			})
		}
	}
}

// BenchmarkOptimizerStep times Adam and SGD with momentum on a buffer the
// size of the B9 MLP's parameters, against the plain Go loop (go/kernel).
func BenchmarkOptimizerStep(b *testing.B) {
	const n = 784*512 + 512 + 512*512 + 512 + 512*10 + 10
	for _, kc := range kernelCases() {
		rng := rand.New(rand.NewPCG(1, 1))
		p, g := randSlice(rng, n), randSlice(rng, n)
		st := make([][]float32, kc.state)
		for i := range st {
			st[i] = make([]float32, n)
		}
		var goNs float64
		for _, impl := range []struct {
			name string
			f    func(p, g []float32, st [][]float32)
		}{{"go", kc.goLoop}, {"kernel", kc.kernel}} {
			b.Run(kc.name+"/"+impl.name, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					impl.f(p, g, st)
				}
				ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				b.ReportMetric(float64(n)/ns, "params/ns")
				if impl.name == "go" {
					goNs = ns
				} else if goNs > 0 {
					b.ReportMetric(goNs/ns, "go/kernel")
				}
			})
		}
	}
}

// The ReLU kernels give the Go loops' results bit for bit, zeros of both
// signs, infinities and NaNs included.
func TestReLUKernelsMatchGoLoops(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), -1e-30, 1e-30}
	for _, n := range []int{1, 7, 8, 9, cgoMinLen - 1, cgoMinLen, cgoMinLen + 13, 5003} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 5))
			x, g := randSlice(rng, n), randSlice(rng, n)
			for i := range x {
				if i%5 == 0 {
					x[i] = special[(i/5)%len(special)]
				}
			}
			same := func(what string, want, got []float32) {
				t.Helper()
				for i := range want {
					if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
						t.Fatalf("%s %d (x=%v): Go %v, kernel %v", what, i, x[i], want[i], got[i])
					}
				}
			}
			yGo, yK := make([]float32, n), make([]float32, n)
			reluGo(yGo, x)
			reluForward(yK, x)
			same("forward", yGo, yK)
			// The gradient is checked against outputs of both signs, as a
			// caller may pass any y.
			for _, y := range [][]float32{yGo, x} {
				dGo, dK := make([]float32, n), make([]float32, n)
				reluGradGo(dGo, y, g)
				reluBackward(dK, y, g)
				same("backward", dGo, dK)
			}
		})
	}
}
