package data

import (
	"errors"
	"fmt"
	"math/rand/v2"
)

// DistributedSampler splits the indices [0, Len) of a data set among
// WorldSize workers the way PyTorch's DistributedSampler does: every rank
// gets a shard of the same length, shards are disjoint except for padding,
// and the per-epoch shuffle is the same on every rank.
//
// The epoch's order is a permutation of [0, Len) drawn from (Seed, epoch)
// when Shuffle is set, else the identity. Without DropLast the order is
// padded by wrapping around to its start until its length is
// ceil(Len/WorldSize)·WorldSize (so a few examples appear twice in the
// epoch); with DropLast it is cut to floor(Len/WorldSize)·WorldSize. Rank r
// takes positions r, r+WorldSize, r+2·WorldSize, … of that list.
//
// The shuffle uses math/rand/v2's PCG seeded with (Seed, epoch), so orders
// are stable across Go releases but differ from torch's.
type DistributedSampler struct {
	Len, Rank, WorldSize int
	Shuffle              bool
	Seed                 int64
	DropLast             bool
}

// ErrSamplerConfig is wrapped by Validate's errors.
var ErrSamplerConfig = errors.New("invalid distributed sampler")

// Validate reports a negative Len, a WorldSize below 1 or a Rank outside
// [0, WorldSize).
func (s DistributedSampler) Validate() error {
	switch {
	case s.Len < 0:
		return fmt.Errorf("%w: negative length %d", ErrSamplerConfig, s.Len)
	case s.WorldSize < 1:
		return fmt.Errorf("%w: world size %d", ErrSamplerConfig, s.WorldSize)
	case s.Rank < 0 || s.Rank >= s.WorldSize:
		return fmt.Errorf("%w: rank %d outside world of %d", ErrSamplerConfig, s.Rank, s.WorldSize)
	}
	return nil
}

// NumSamples is the length of every rank's shard per epoch.
func (s DistributedSampler) NumSamples() int {
	if s.DropLast {
		return s.Len / s.WorldSize
	}
	return (s.Len + s.WorldSize - 1) / s.WorldSize
}

// Indices returns this rank's data indices for epoch, in the order to visit
// them. It panics if Validate fails.
func (s DistributedSampler) Indices(epoch int) []int {
	if err := s.Validate(); err != nil {
		panic(err)
	}
	n := s.NumSamples()
	out := make([]int, n)
	if n == 0 {
		return out
	}
	order := make([]int, s.Len)
	if s.Shuffle {
		rng := rand.New(rand.NewPCG(uint64(s.Seed), uint64(epoch)))
		order = rng.Perm(s.Len)
	} else {
		for i := range order {
			order[i] = i
		}
	}
	// Position p of the padded list is order[p mod Len]: wrapping around as
	// often as needed, which also covers Len < WorldSize.
	for i := range out {
		out[i] = order[(s.Rank+i*s.WorldSize)%s.Len]
	}
	return out
}

// Batches splits indices into consecutive batches of batchSize, keeping a
// last partial batch. The batches are sub-slices of indices (no copy). It
// panics if batchSize is below 1.
func Batches(indices []int, batchSize int) [][]int {
	if batchSize < 1 {
		panic(fmt.Sprintf("data: batch size %d", batchSize))
	}
	out := make([][]int, 0, (len(indices)+batchSize-1)/batchSize)
	for len(indices) > 0 {
		k := min(batchSize, len(indices))
		out = append(out, indices[:k:k])
		indices = indices[k:]
	}
	return out
}
