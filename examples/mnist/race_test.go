//go:build race

package mnist_test

// Under the race detector Go's matmul runs 5-10 times slower, so the
// distributed test trains on a tenth of the training set for one epoch and
// asks less of it; the full run (≥ 97 %) is the test without -race.
const (
	raceTrainSamples = 6000
	raceEpochs       = 1
	wantAccuracy     = 0.88
)
