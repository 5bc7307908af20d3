package data

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shoenig/test/must"
)

// torchReference follows torch.utils.data.DistributedSampler.__iter__
// literally: permute, pad by repeating the list (or cut), then take every
// WorldSize-th element from Rank.
func torchReference(s DistributedSampler, epoch int) []int {
	var idx []int
	if s.Shuffle {
		idx = rand.New(rand.NewPCG(uint64(s.Seed), uint64(epoch))).Perm(s.Len)
	} else {
		for i := 0; i < s.Len; i++ {
			idx = append(idx, i)
		}
	}
	var numSamples int
	if s.DropLast && s.Len%s.WorldSize != 0 {
		numSamples = (s.Len - s.WorldSize + s.WorldSize - 1) / s.WorldSize // ceil((len-W)/W)
		if s.Len < s.WorldSize {
			numSamples = 0
		}
	} else {
		numSamples = (s.Len + s.WorldSize - 1) / s.WorldSize
	}
	total := numSamples * s.WorldSize
	if !s.DropLast && len(idx) > 0 {
		pad := total - len(idx)
		if pad <= len(idx) {
			idx = append(idx, idx[:pad]...)
		} else {
			rep := []int{}
			for k := 0; k < (pad+len(idx)-1)/len(idx); k++ {
				rep = append(rep, idx...)
			}
			idx = append(idx, rep[:pad]...)
		}
	} else {
		idx = idx[:total]
	}
	out := []int{}
	for p := s.Rank; p < total; p += s.WorldSize {
		out = append(out, idx[p])
	}
	return out
}

func TestDistributedSamplerProperties(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 5, 7, 10, 16, 33, 100} {
		for _, w := range []int{1, 2, 3, 4, 8, 11} {
			for _, shuffle := range []bool{false, true} {
				for _, drop := range []bool{false, true} {
					name := fmt.Sprintf("len=%d/world=%d/shuffle=%v/droplast=%v", n, w, shuffle, drop)
					t.Run(name, func(t *testing.T) {
						checkSampler(t, DistributedSampler{Len: n, WorldSize: w, Shuffle: shuffle, Seed: 42, DropLast: drop})
					})
				}
			}
		}
	}
}

func checkSampler(t *testing.T, base DistributedSampler) {
	n, w := base.Len, base.WorldSize
	want := (n + w - 1) / w
	if base.DropLast {
		want = n / w
	}
	var orders [][]int
	for _, epoch := range []int{0, 1, 7} {
		var order []int // every rank's shard, rank after rank
		count := make([]int, n)
		for r := 0; r < w; r++ {
			s := base
			s.Rank = r
			got := s.Indices(epoch)
			// Equal lengths, the torch algorithm, determinism.
			must.SliceLen(t, want, got)
			must.Eq(t, torchReference(s, epoch), got, must.Sprintf("rank %d epoch %d", r, epoch))
			must.Eq(t, got, s.Indices(epoch))
			for _, i := range got {
				must.Between(t, 0, i, n-1)
				count[i]++
			}
			order = append(order, got...)
		}
		orders = append(orders, order)
		total := w * want
		for i, c := range count {
			switch {
			case base.DropLast || total == n:
				// Disjoint shards; cut examples appear nowhere.
				must.LessEq(t, 1, c, must.Sprintf("index %d", i))
			default:
				// Padding repeats some examples, the rest exactly once, and
				// every example is covered.
				must.Between(t, 1, c, (total+n-1)/n, must.Sprintf("index %d", i))
			}
		}
		covered := 0
		for _, c := range count {
			covered += c
		}
		must.Eq(t, total, covered)
		if !base.DropLast {
			must.SliceNotContains(t, count, 0)
		}
	}
	// The epoch reshuffles (with 5 or more examples a repeat is unlikely
	// enough that these fixed seeds show none), or changes nothing without
	// Shuffle.
	for e := 1; e < len(orders); e++ {
		switch {
		case !base.Shuffle:
			must.Eq(t, orders[0], orders[e])
		case n >= 5 && want > 0:
			must.NotEq(t, orders[0], orders[e])
		}
	}
}

func TestDistributedSamplerEpochsAndRanks(t *testing.T) {
	s := DistributedSampler{Len: 50, WorldSize: 2, Shuffle: true, Seed: 1}
	e0, e1 := s.Indices(0), s.Indices(1)
	must.NotEq(t, e0, e1)
	must.Eq(t, e0, DistributedSampler{Len: 50, WorldSize: 2, Shuffle: true, Seed: 1}.Indices(0))
	must.NotEq(t, e0, DistributedSampler{Len: 50, WorldSize: 2, Shuffle: true, Seed: 2}.Indices(0))
	// Without shuffling the epoch does not matter and rank r gets r, r+W, ...
	plain := DistributedSampler{Len: 7, Rank: 1, WorldSize: 3}
	must.Eq(t, []int{1, 4, 0}, plain.Indices(0))
	must.Eq(t, plain.Indices(0), plain.Indices(5))
	// Len < WorldSize wraps around: 2 examples over 5 ranks.
	var got []int
	for r := 0; r < 5; r++ {
		got = append(got, DistributedSampler{Len: 2, Rank: r, WorldSize: 5}.Indices(0)...)
	}
	must.Eq(t, []int{0, 1, 0, 1, 0}, got)
	// The shuffle is pinned: a change of generator would silently change
	// every run's data order.
	must.Eq(t, []int{3, 1, 5}, DistributedSampler{Len: 6, Rank: 0, WorldSize: 2, Shuffle: true, Seed: 42}.Indices(3))
}

func TestDistributedSamplerValidate(t *testing.T) {
	for _, s := range []DistributedSampler{
		{Len: -1, WorldSize: 1},
		{Len: 5, WorldSize: 0},
		{Len: 5, Rank: 2, WorldSize: 2},
		{Len: 5, Rank: -1, WorldSize: 2},
	} {
		must.ErrorIs(t, s.Validate(), ErrSamplerConfig)
		must.Panic(t, func() { s.Indices(0) })
	}
	must.NoError(t, DistributedSampler{Len: 0, WorldSize: 3, Rank: 2}.Validate())
}

func TestBatches(t *testing.T) {
	idx := []int{9, 8, 7, 6, 5, 4, 3}
	must.Eq(t, [][]int{{9, 8, 7}, {6, 5, 4}, {3}}, Batches(idx, 3))
	must.Eq(t, [][]int{{9, 8, 7, 6, 5, 4, 3}}, Batches(idx, 100))
	must.SliceEmpty(t, Batches(nil, 4))
	b := Batches(idx, 2)
	must.Eq(t, 4, len(b))
	// Appending to a batch must not overwrite the next one.
	_ = append(b[0], -1)
	must.Eq(t, []int{7, 6}, b[1])
	must.True(t, slices.Equal(idx, []int{9, 8, 7, 6, 5, 4, 3}))
	must.Panic(t, func() { Batches(idx, 0) })
}
