//go:build !cgo || !amd64

package nn

// Without cgo, or off amd64, the optimizers and ReLU run the Go loops of
// kernels.go.

func adamUpdate(p, g, m, v []float32, c adamCoef) { adamGo(p, g, m, v, c) }

func sgdUpdate(p, g []float32, lr, wd float32) { sgdGo(p, g, lr, wd) }

func reluForward(out, x []float32) { reluGo(out, x) }

func reluBackward(dx, y, g []float32) { reluGradGo(dx, y, g) }

func sgdMomentumUpdate(p, g, v []float32, lr, mu, wd float32, nesterov bool) {
	sgdMomentumGo(p, g, v, lr, mu, wd, nesterov)
}

// cgoMinLen is the length from which the cgo build calls C; here it only
// shapes the kernel tests.
const cgoMinLen = 256
