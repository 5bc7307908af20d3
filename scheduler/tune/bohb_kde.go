package tune

import (
	"math"
	"math/rand/v2"
)

// bohbKDE is BOHB's model of the good or the bad configs of one budget
// (Falkner et al. 2018): a product-kernel density over the dimensions,
// one kernel per observation and no prior, with the normal-reference
// ("Scott") bandwidth 1.06 σ n^(-1/(d+4)) of each dimension (σ: the
// observations' spread there), at least minBW of the range. A numeric
// dimension has a Gaussian kernel truncated to the range; a choice the
// Aitchison–Aitken kernel (the observed option with 1-λ, each other with
// λ/(c-1), λ the bandwidth).
type bohbKDE struct {
	ms   []dimModel
	data [][]float64 // observations, model coordinates per dimension
	bw   []float64
}

func newBOHBKDE(ms []dimModel, data [][]float64, minBW float64) *bohbKDE {
	k := &bohbKDE{ms: ms, data: data, bw: make([]float64, len(ms))}
	n := float64(len(data))
	for d, m := range ms {
		mean, sq := 0.0, 0.0
		for _, row := range data {
			mean += row[d]
		}
		mean /= n
		for _, row := range data {
			sq += (row[d] - mean) * (row[d] - mean)
		}
		bw := 1.06 * math.Sqrt(sq/n) * math.Pow(n, -1/float64(len(ms)+4))
		if m.cats > 0 {
			k.bw[d] = math.Min(math.Max(bw, minBW), float64(m.cats-1)/float64(m.cats))
			continue
		}
		span := m.hi - m.lo
		k.bw[d] = math.Min(math.Max(bw, minBW*span), span)
	}
	return k
}

// kernel is the log density (or mass) of observation i's kernel at x in
// dimension d, with the bandwidth scaled by factor.
func (k *bohbKDE) kernel(d, i int, x, factor float64) float64 {
	m, mu, s := k.ms[d], k.data[i][d], k.bw[d]*factor
	if m.cats > 0 {
		if int(x) == int(mu) {
			return math.Log(1 - k.bw[d])
		}
		return math.Log(k.bw[d] / float64(m.cats-1))
	}
	z := normMass(mu, s, m.lo, m.hi)
	if m.q > 0 {
		a, b := math.Max(x-m.q/2, m.lo), math.Min(x+m.q/2, m.hi)
		return math.Log(math.Max(normMass(mu, s, a, b), 1e-300)) - math.Log(z)
	}
	t := (x - mu) / s
	return -0.5*t*t - math.Log(s) - 0.5*math.Log(2*math.Pi) - math.Log(z)
}

// logPDF is the log density of the point x.
func (k *bohbKDE) logPDF(x []float64) float64 {
	terms := make([]float64, len(k.data))
	for i := range k.data {
		for d := range k.ms {
			terms[i] += k.kernel(d, i, x[d], 1)
		}
	}
	return logSumExp(terms) - math.Log(float64(len(k.data)))
}

// sample draws a point near one observation chosen uniformly: each
// numeric coordinate from its kernel widened by factor (BOHB's bandwidth
// factor, which explores around the good configs), each choice kept with
// probability 1-λ and otherwise drawn uniformly.
func (k *bohbKDE) sample(r *rand.Rand, factor float64) []float64 {
	row := k.data[r.IntN(len(k.data))]
	x := make([]float64, len(k.ms))
	for d, m := range k.ms {
		if m.cats > 0 {
			x[d] = row[d]
			if r.Float64() >= 1-k.bw[d] {
				x[d] = float64(r.IntN(m.cats))
			}
			continue
		}
		v := truncNormal(r, row[d], k.bw[d]*factor, m.lo, m.hi)
		_, x[d] = m.external(v)
	}
	return x
}
