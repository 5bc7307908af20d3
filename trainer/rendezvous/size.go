package rendezvous

import "fmt"

// Size is the size of gang a member asks for: Max members, or as few as
// Min when no more have joined within the settle time (an elastic gang,
// as Ray Train's num_workers = (min, max)). Fixed(n) is a gang of exactly
// n.
type Size struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// Fixed is a gang of exactly n members.
func Fixed(n int) Size { return Size{Min: n, Max: n} }

// Elastic reports whether a gang of this size may complete with fewer
// than Max members.
func (z Size) Elastic() bool { return z.Min < z.Max }

func (z Size) String() string {
	if !z.Elastic() {
		return fmt.Sprint(z.Max)
	}
	return fmt.Sprintf("%d..%d", z.Min, z.Max)
}

// Check says what is wrong with a size, if anything.
func (z Size) Check() error {
	switch {
	case z.Min < 1:
		return fmt.Errorf("world size %v: the minimum must be at least 1", z)
	case z.Max < z.Min:
		return fmt.Errorf("world size %d..%d: the maximum is below the minimum", z.Min, z.Max)
	}
	return nil
}
