package tune

import (
	"fmt"
	"math/rand/v2"
)

// Searchers: both are Ray's basic variant generator.
const (
	// SearchRandom expands every grid_search and samples every other
	// function independently for each variant.
	SearchRandom = "random"
	// SearchGrid also enumerates every choice, as if it were a grid_search;
	// the remaining functions are sampled.
	SearchGrid = "grid"
)

// maxVariants bounds the variants of one experiment, and so its trials:
// each is listed in the experiment state (from the start, unless
// num_samples is unlimited).
const maxVariants = 100_000

// Variant is one trial's resolved config.
type Variant struct {
	// Index counts variants from 0 in the order they are generated.
	Index int
	// Config is the param space with every Domain replaced by a value.
	Config map[string]any
	// Params holds the value chosen for each Domain, by path ("a/b/0").
	Params map[string]any
}

// Generator produces the variants of a param space: num_samples repetitions
// of the grid (the cross product of every grid_search), with the other
// functions sampled from a seeded generator, so the same seed gives the
// same sequence. It is a pure state machine: no I/O, no clock.
type Generator struct {
	space      map[string]any
	sites      []site
	enumerated []int // indices into sites, enumerated in odometer order
	sizes      []int // number of values of each enumerated site
	gridSize   int
	numSamples int
	rng        *rand.Rand
	next       int
}

// NewGenerator returns the variant generator of space. searcher is
// SearchRandom (or "") or SearchGrid; numSamples 0 counts as 1, and a
// negative one (UnlimitedSamples) as many as maxVariants allows.
func NewGenerator(space map[string]any, searcher string, numSamples int, seed uint64) (*Generator, error) {
	if numSamples == 0 {
		numSamples = 1
	}
	switch searcher {
	case "", SearchRandom, SearchGrid:
	default:
		return nil, fmt.Errorf("%w: unknown searcher %q (want %q or %q)", ErrSpace, searcher, SearchRandom, SearchGrid)
	}
	if numSamples > maxVariants {
		return nil, fmt.Errorf("%w: num_samples %d exceeds %d", ErrSpace, numSamples, maxVariants)
	}
	g := &Generator{space: space, sites: sites(space, nil, nil), gridSize: 1, numSamples: numSamples,
		rng: rand.New(rand.NewPCG(seed, 0x7475_6e65))}
	for i, s := range g.sites {
		var n int
		switch d := s.dom.(type) {
		case grid:
			n = len(d)
		case choice:
			if searcher == SearchGrid {
				n = len(d)
			}
		}
		if n > 0 {
			if g.gridSize > maxVariants/n {
				return nil, fmt.Errorf("%w: the grid has more than %d variants", ErrSpace, maxVariants)
			}
			g.enumerated = append(g.enumerated, i)
			g.sizes = append(g.sizes, n)
			g.gridSize *= n
		}
	}
	if numSamples < 0 {
		g.numSamples = maxVariants / g.gridSize
	} else if g.gridSize > maxVariants/numSamples {
		return nil, fmt.Errorf("%w: %d samples of a grid of %d exceed %d variants", ErrSpace, numSamples, g.gridSize, maxVariants)
	}
	return g, nil
}

// Total is the number of variants: num_samples times the grid's size.
func (g *Generator) Total() int { return g.numSamples * g.gridSize }

// Next returns the next variant; ok is false after Total variants.
func (g *Generator) Next() (v Variant, ok bool) {
	if g.next >= g.Total() {
		return Variant{}, false
	}
	combo := g.next % g.gridSize
	chosen := make(map[int]int, len(g.enumerated))
	for k := len(g.enumerated) - 1; k >= 0; k-- { // the last grid varies fastest
		i := g.enumerated[k]
		chosen[i] = combo % g.sizes[k]
		combo /= g.sizes[k]
	}
	cfg := deepCopy(g.space).(map[string]any)
	params := make(map[string]any, len(g.sites))
	sample := func(_ string, d Domain) any { return d.Sample(g.rng) }
	for i, s := range g.sites {
		var val any
		opts, isOpts := options(s.dom)
		idx, ok := chosen[i]
		switch {
		case ok:
			val = opts[idx]
		case isOpts: // as choice.Sample draws it
			idx = g.rng.IntN(len(opts))
			val = opts[idx]
		default:
			val = s.dom.Sample(g.rng)
		}
		params[s.name()] = val
		if isOpts {
			val = resolveNested(val, s.name(), idx, sample, params)
			params[s.name()] = val
		}
		setPath(cfg, s.path, val)
	}
	v = Variant{Index: g.next, Config: cfg, Params: params}
	g.next++
	return v, true
}
