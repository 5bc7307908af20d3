package tune

import (
	"math"
	"math/rand/v2"
)

// Parzen estimators of one dimension of a search space, as TPE and BOHB
// model the good and the bad configs (Bergstra et al. 2011; the defaults
// are Optuna's): a mixture of truncated normals, one per observation plus
// a prior over the whole range, for numbers; weighted counts for choices.

// dimModel is how the model sees one search-space function: categorical
// (cats options) or numeric on [lo, hi] in the model's space (the log of
// the value for log dimensions), with a grid step q (0 when continuous).
type dimModel struct {
	dom        Domain
	cats       int
	lo, hi     float64
	q          float64
	log        bool
	priorMu    float64
	priorSigma float64
}

// modelOf describes a Domain for the estimators.
func modelOf(d Domain) dimModel {
	m := dimModel{dom: d}
	switch x := d.(type) {
	case choice:
		m.cats = len(x)
		return m
	case grid:
		m.cats = len(x)
		return m
	case uniform:
		m.lo, m.hi = x.lo, x.hi
	case quniform:
		m.q = x.q
		m.lo, m.hi = x.lo-x.q/2, x.hi+x.q/2
	case loguniform:
		m.log, m.lo, m.hi = true, math.Log(x.lo), math.Log(x.hi)
	case qloguniform: // modelled continuous in log space, rounded on the way out
		m.log, m.lo, m.hi = true, math.Log(x.lo), math.Log(x.hi)
	case lograndint: // modelled continuous in log space, rounded on the way out
		m.log, m.lo, m.hi = true, math.Log(float64(x.lo)), math.Log(float64(x.hi))
	case qlograndint:
		m.log, m.lo, m.hi = true, math.Log(float64(x.lo)), math.Log(float64(x.hi))
	case randint:
		m.q, m.lo, m.hi = 1, float64(x.lo)-0.5, float64(x.hi-1)+0.5
	case qrandint:
		m.q, m.lo, m.hi = float64(x.q), float64(x.lo)-float64(x.q)/2, float64(x.hi)+float64(x.q)/2
	case randn: // truncated at 5 standard deviations, with the prior as given
		m.q, m.lo, m.hi = x.q, x.mean-5*x.sd-x.q/2, x.mean+5*x.sd+x.q/2
		m.priorMu, m.priorSigma = x.mean, x.sd
		return m
	}
	m.priorMu, m.priorSigma = (m.lo+m.hi)/2, m.hi-m.lo
	return m
}

// internal is a value's coordinate in the model's space (an option's
// index for a choice); ok is false when v is not a value of the dimension.
func (m dimModel) internal(v any) (float64, bool) {
	if opts, ok := options(m.dom); ok {
		i, ok := optionIndex(opts, v)
		return float64(i), ok
	}
	f, ok := toFloat(v)
	if !ok {
		return 0, false
	}
	if m.log {
		if f <= 0 {
			return 0, false
		}
		f = math.Log(f)
	}
	return f, true
}

// external turns a model coordinate into the dimension's value, and
// returns the coordinate of that value (snapped to the grid).
func (m dimModel) external(x float64) (any, float64) {
	if opts, ok := options(m.dom); ok {
		return opts[int(x)], x
	}
	switch d := m.dom.(type) {
	case uniform:
		return math.Min(math.Max(x, d.lo), d.hi), x
	case loguniform:
		v := math.Min(math.Max(math.Exp(x), d.lo), d.hi)
		return v, math.Log(v)
	case qloguniform:
		v := quantize(math.Exp(x), d.q, d.lo, d.hi)
		return v, math.Log(v)
	case quniform:
		v := quantize(x, d.q, d.lo, d.hi)
		return v, v
	case lograndint:
		v := math.Min(math.Max(math.Round(math.Exp(x)), float64(d.lo)), float64(d.hi-1))
		return int(v), math.Log(v)
	case qlograndint:
		v := quantize(math.Exp(x), float64(d.q), float64(d.lo), float64(d.hi))
		return int(v), math.Log(v)
	case randint:
		v := math.Min(math.Max(math.Round(x), float64(d.lo)), float64(d.hi-1))
		return int(v), v
	case qrandint:
		v := quantize(x, float64(d.q), float64(d.lo), float64(d.hi))
		return int(v), v
	case randn:
		if d.q > 0 {
			v := roundFloat(math.Round(x/d.q) * d.q)
			return v, v
		}
		return x, x
	}
	return x, x
}

// parzen is one estimator of one dimension.
type parzen struct {
	m       dimModel
	weights []float64   // mixture weights, summing to 1 (the prior last)
	mus     []float64   // numeric: component means
	sigmas  []float64   // numeric: component bandwidths
	cat     [][]float64 // categorical: each component's distribution over the options
	// byShape scores a continuous dimension's kernels by their shape
	// alone: each is as high at its mean whatever its bandwidth, which
	// weighs a kernel by its bandwidth against a density's 1/bandwidth.
	// TPE scores so (see newTPEParzen); BOHB's densities do not.
	byShape bool
}

// defaultWeights is Optuna's: equal weights for up to 25 observations,
// then a ramp from 1/n to 1 for the oldest ones and 1 for the newest 25.
func defaultWeights(n int) []float64 {
	w := make([]float64, n)
	if n < 25 {
		for i := range w {
			w[i] = 1
		}
		return w
	}
	ramp := n - 25
	for i := range ramp {
		if ramp == 1 {
			w[i] = 1.0 / float64(n)
		} else {
			w[i] = 1.0/float64(n) + (1-1.0/float64(n))*float64(i)/float64(ramp-1)
		}
	}
	for i := ramp; i < n; i++ {
		w[i] = 1
	}
	return w
}

// newParzen fits an estimator to obs (model coordinates, oldest first),
// with the prior of weight priorWeight.
func newParzen(m dimModel, obs []float64, priorWeight float64, weights []float64) *parzen {
	n := len(obs)
	p := &parzen{m: m, weights: append(append([]float64(nil), weights...), priorWeight)}
	sum := 0.0
	for _, w := range p.weights {
		sum += w
	}
	for i := range p.weights {
		p.weights[i] /= sum
	}
	if m.cats > 0 {
		prior := priorWeight / float64(n+1)
		p.cat = make([][]float64, n+1)
		for k := range p.cat {
			row := make([]float64, m.cats)
			total := 0.0
			for c := range row {
				row[c] = prior
				if k < n && int(obs[k]) == c {
					row[c]++
				}
				total += row[c]
			}
			for c := range row {
				row[c] /= total
			}
			p.cat[k] = row
		}
		return p
	}
	p.mus = append(append([]float64(nil), obs...), m.priorMu)
	p.sigmas = bandwidths(p.mus, m.lo, m.hi)
	p.sigmas[n] = m.priorSigma
	return p
}

// newTPEParzen is newParzen with the kernels scored by their shape, as
// Optuna 3.1's TPESampler scores them: its truncated normal's log density
// leaves out the -log(bandwidth) term (Optuna issue 5109, corrected in a
// later release). Measured over 200 seeds, density scoring had 1.3x
// Optuna's median regret at 50 trials on Hartmann-6 (univariate) and, with
// each trial's own bandwidths in the joint model, 1.3x on Branin
// (BENCHMARKS.md, B12). A likely reason: as densities, the bad trials'
// narrow kernels (many trials, small gaps) tower over the good trials'
// wide ones, so the ratio is highest wherever bad trials are sparse, and
// the search fills gaps instead of closing in on the good trials.
func newTPEParzen(m dimModel, obs []float64, priorWeight float64, weights []float64) *parzen {
	p := newParzen(m, obs, priorWeight, weights)
	p.byShape = true
	return p
}

// bandwidths is each mean's distance to the farther of its neighbours
// (the range's ends at the edges, except that the outermost means take
// their inner neighbour's distance), clipped to [range/min(100, n+1),
// range]: the "magic clip".
func bandwidths(mus []float64, lo, hi float64) []float64 {
	n := len(mus)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sortIdx(order, mus)
	ends := make([]float64, n+2)
	ends[0], ends[n+1] = lo, hi
	for i, k := range order {
		ends[i+1] = mus[k]
	}
	sorted := make([]float64, n)
	for i := range sorted {
		sorted[i] = math.Max(ends[i+1]-ends[i], ends[i+2]-ends[i+1])
	}
	if n+2 >= 4 {
		sorted[0] = ends[2] - ends[1]
		sorted[n-1] = ends[n] - ends[n-1]
	}
	maxSigma := hi - lo
	minSigma := (hi - lo) / math.Min(100, 1+float64(n))
	out := make([]float64, n)
	for i, k := range order {
		out[k] = math.Min(math.Max(sorted[i], minSigma), maxSigma)
	}
	return out
}

// sortIdx sorts idx by keys[idx], stably.
func sortIdx(idx []int, keys []float64) {
	for i := 1; i < len(idx); i++ {
		for j := i; j > 0 && keys[idx[j]] < keys[idx[j-1]]; j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
}

// sample draws one model coordinate (snapped to the dimension's grid).
func (p *parzen) sample(r *rand.Rand) float64 {
	return p.sampleFrom(r, p.pick(r))
}

// pick draws a component by its weight.
func (p *parzen) pick(r *rand.Rand) int {
	u := r.Float64()
	for i, w := range p.weights {
		if u < w {
			return i
		}
		u -= w
	}
	return len(p.weights) - 1
}

// sampleFrom draws one model coordinate from component k (snapped to the
// dimension's grid).
func (p *parzen) sampleFrom(r *rand.Rand, k int) float64 {
	if p.cat != nil {
		u := r.Float64()
		row := p.cat[k]
		for c, w := range row {
			if u < w {
				return float64(c)
			}
			u -= w
		}
		return float64(len(row) - 1)
	}
	x := truncNormal(r, p.mus[k], p.sigmas[k], p.m.lo, p.m.hi)
	_, snapped := p.m.external(x)
	return snapped
}

// logPDF is the log density (log mass for gridded and categorical
// dimensions; by shape with byShape) of the model coordinate x.
func (p *parzen) logPDF(x float64) float64 {
	terms := make([]float64, len(p.weights))
	for k, w := range p.weights {
		terms[k] = math.Log(w) + p.componentLogPDF(k, x)
	}
	return logSumExp(terms)
}

// componentLogPDF is component k's log density (or mass) at x.
func (p *parzen) componentLogPDF(k int, x float64) float64 {
	if p.cat != nil {
		return math.Log(p.cat[k][int(x)])
	}
	mu, s := p.mus[k], p.sigmas[k]
	z := normMass(mu, s, p.m.lo, p.m.hi)
	if p.m.q > 0 {
		a, b := math.Max(x-p.m.q/2, p.m.lo), math.Min(x+p.m.q/2, p.m.hi)
		return math.Log(math.Max(normMass(mu, s, a, b), 1e-300)) - math.Log(z)
	}
	d := (x - mu) / s
	if p.byShape {
		return -0.5*d*d - 0.5*math.Log(2*math.Pi) - math.Log(z)
	}
	return -0.5*d*d - math.Log(s) - 0.5*math.Log(2*math.Pi) - math.Log(z)
}

func logSumExp(xs []float64) float64 {
	m := math.Inf(-1)
	for _, x := range xs {
		m = math.Max(m, x)
	}
	if math.IsInf(m, -1) {
		return m
	}
	s := 0.0
	for _, x := range xs {
		s += math.Exp(x - m)
	}
	return m + math.Log(s)
}

// normCDF is the standard normal distribution function.
func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// normMass is the probability N(mu, s²) gives [a, b], computed on the side
// of the mean where it is precise.
func normMass(mu, s, a, b float64) float64 {
	za, zb := (a-mu)/s, (b-mu)/s
	if za > 0 {
		return math.Max(normCDF(-za)-normCDF(-zb), 1e-300)
	}
	return math.Max(normCDF(zb)-normCDF(za), 1e-300)
}

// truncNormal draws from N(mu, s²) truncated to [lo, hi] by inverting the
// distribution function (on the side of the mean where it is precise).
func truncNormal(r *rand.Rand, mu, s, lo, hi float64) float64 {
	za, zb := (lo-mu)/s, (hi-mu)/s
	flip := za > 0
	if flip {
		za, zb = -zb, -za
	}
	pa, pb := normCDF(za), normCDF(zb)
	p := pa + r.Float64()*(pb-pa)
	p = math.Min(math.Max(p, 1e-300), 1-1e-16)
	z := math.Sqrt2 * math.Erfinv(2*p-1)
	if flip {
		z = -z
	}
	return math.Min(math.Max(mu+s*z, lo), hi)
}
