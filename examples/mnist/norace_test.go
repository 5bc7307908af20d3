//go:build !race

package mnist_test

// Without the race detector the distributed test trains the default
// config (all 60000 images, 3 epochs) and must reach 97 %.
const (
	raceTrainSamples = 0
	raceEpochs       = 3
	raceTestSamples  = 0
	wantAccuracy     = 0.97
)
