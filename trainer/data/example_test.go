package data_test

import (
	"fmt"

	"github.com/nomad-train/nomad-train/trainer/data"
)

// Ten examples over three workers: each gets four indices, two examples
// are repeated to make the shards equal, and the shards are batched.
func ExampleDistributedSampler() {
	for rank := 0; rank < 3; rank++ {
		s := data.DistributedSampler{Len: 10, Rank: rank, WorldSize: 3}
		idx := s.Indices(0)
		fmt.Println(rank, idx, data.Batches(idx, 3))
	}
	// Output:
	// 0 [0 3 6 9] [[0 3 6] [9]]
	// 1 [1 4 7 0] [[1 4 7] [0]]
	// 2 [2 5 8 1] [[2 5 8] [1]]
}
