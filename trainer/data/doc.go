// Package data shards and batches training data for data-parallel workers:
// the Go counterpart of PyTorch's DistributedSampler and a small in-memory
// Dataset that fills batch matrices without allocating.
//
// A worker's epoch loop:
//
//	s := data.DistributedSampler{Len: ds.Len(), Rank: rank, WorldSize: world, Shuffle: true, Seed: 42}
//	var x, y nn.Matrix
//	for epoch := 0; epoch < epochs; epoch++ {
//		for _, batch := range data.Batches(s.Indices(epoch), 32) {
//			ds.Gather(batch, &x, &y)
//			// forward, backward, all-reduce, step
//		}
//	}
package data
