package nn

import "math"

// The optimizers' element-wise updates, written once in Go. Every product
// is wrapped in an explicit float32 conversion, which the Go spec says
// rounds it, so the compiler never fuses a multiply and an add into an FMA:
// the results are the same bit for bit on every architecture and equal to
// the vectorised C kernels of kernels_cgo.go, which are compiled with
// contraction off.

// adamCoef is one Adam step's scalars, bias corrections folded in.
type adamCoef struct {
	b1, ob1    float32 // β1 and 1-β1
	b2, ob2    float32 // β2 and 1-β2
	wd         float32 // weight decay
	step       float32 // lr / (1-β1ᵗ)
	invSqrtBC2 float32 // 1 / √(1-β2ᵗ)
	eps        float32
}

// adamGo is the Adam update over equal-length p, g, m and v.
func adamGo(p, g, m, v []float32, c adamCoef) {
	n := len(p)
	g, m, v = g[:n], m[:n], v[:n] // one bounds check here, none in the loop
	for i := range p {
		gi := g[i] + float32(c.wd*p[i])
		mi := float32(c.b1*m[i]) + float32(c.ob1*gi)
		vi := float32(c.b2*v[i]) + float32(float32(c.ob2*gi)*gi)
		m[i], v[i] = mi, vi
		denom := float32(sqrt32(vi)*c.invSqrtBC2) + c.eps
		p[i] -= float32(c.step*mi) / denom
	}
}

// sgdGo is p -= lr·(g + wd·p), SGD without momentum.
func sgdGo(p, g []float32, lr, wd float32) {
	g = g[:len(p)]
	for i := range p {
		p[i] -= float32(lr * (g[i] + float32(wd*p[i])))
	}
}

// sgdMomentumGo is SGD with momentum μ, Nesterov's variant when nesterov.
func sgdMomentumGo(p, g, v []float32, lr, mu, wd float32, nesterov bool) {
	n := len(p)
	g, v = g[:n], v[:n]
	if nesterov {
		for i := range p {
			gi := g[i] + float32(wd*p[i])
			vi := float32(mu*v[i]) + gi
			v[i] = vi
			p[i] -= float32(lr * (gi + float32(mu*vi)))
		}
		return
	}
	for i := range p {
		vi := float32(mu*v[i]) + g[i] + float32(wd*p[i])
		v[i] = vi
		p[i] -= float32(lr * vi)
	}
}

// sqrt32 is the correctly rounded float32 square root (the compiler turns
// this pattern into one SQRTSS).
// reluGo sets out[i] to x[i], or 0 where x[i] <= 0 (NaN passes), as
// max(x, 0) does.
func reluGo(out, x []float32) {
	out = out[:len(x)]
	for i, v := range x {
		out[i] = max(v, 0)
	}
}

// reluGradGo sets dx[i] to g[i], or 0 where the output y[i] <= 0.
func reluGradGo(dx, y, g []float32) {
	dx, y = dx[:len(g)], y[:len(g)]
	for i, gi := range g {
		if y[i] <= 0 {
			gi = 0
		}
		dx[i] = gi
	}
}

func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }
