package data

import "fmt"

// SettingError is a training config's setting that a gang cannot use;
// Key names the setting, so that a spec's check can point at it.
type SettingError struct {
	Key string
	Err error
}

func (e *SettingError) Error() string { return e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// ConfigKey is the setting at fault.
func (e *SettingError) ConfigKey() string { return e.Key }

// CheckGlobalBatch reports whether a global batch of batch examples (the
// setting key) splits evenly over every gang size from minWorkers to
// maxWorkers: each worker takes batch/workers of each step's examples.
// An elastic gang trains at any size in its range, so the batch must
// split over each.
func CheckGlobalBatch(key string, batch, minWorkers, maxWorkers int) error {
	if batch < 1 {
		return &SettingError{key, fmt.Errorf("%s must be at least 1; got %d", key, batch)}
	}
	for n := max(minWorkers, 1); n <= maxWorkers; n++ {
		if batch%n == 0 {
			continue
		}
		if minWorkers == maxWorkers {
			return &SettingError{key, fmt.Errorf("%s %d does not split evenly over %d workers", key, batch, n)}
		}
		return &SettingError{key, fmt.Errorf("%s %d does not split evenly over %d workers, a size the elastic gang of %d to %d may train at: make it a multiple of %d",
			key, batch, n, minWorkers, maxWorkers, lcmUpTo(minWorkers, maxWorkers))}
	}
	return nil
}

// lcmUpTo is the least common multiple of every number from lo to hi.
func lcmUpTo(lo, hi int) int {
	m := 1
	for n := max(lo, 1); n <= hi; n++ {
		m = m / gcd(m, n) * n
	}
	return m
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
