// Package data shards and batches training data for data-parallel workers.
//
// Two ways in, by size of the data set:
//
//   - In memory: a Dataset of float32 features and labels with
//     DistributedSampler, the Go counterpart of PyTorch's sampler (disjoint
//     shards of equal length per rank, a per-epoch shuffle from the seed and
//     the epoch), filling batch matrices without allocating.
//   - Streaming from files: StreamSplit, the counterpart of Ray Data's
//     streaming_split, over a Source (IDX files, CSV or JSON lines with
//     Lines, fixed-size binary records in shard files with Shards, or Zip of
//     several). Each rank reads only its part of every epoch, in few
//     contiguous runs, on a read-ahead goroutine, with a block shuffle and a
//     local shuffle buffer; a run restarted with another world size gets a
//     fresh partition of the same epoch.
//
// A worker's in-memory epoch loop:
//
//	s := data.DistributedSampler{Len: ds.Len(), Rank: rank, WorldSize: world, Shuffle: true, Seed: 42}
//	var x, y nn.Matrix
//	for epoch := 0; epoch < epochs; epoch++ {
//		for _, batch := range data.Batches(s.Indices(epoch), 32) {
//			ds.Gather(batch, &x, &y)
//			// forward, backward, all-reduce, step
//		}
//	}
//
// And a streaming one (see ExampleStreamSplit):
//
//	split := data.StreamSplit{Source: src, Rank: rank, WorldSize: world, Shuffle: true, Seed: 42}
//	st, err := split.Epoch(ctx, epoch, 128)
//	if err != nil { ... }
//	defer st.Close()
//	for b, ok := st.Next(); ok; b, ok = st.Next() {
//		// decode b.Records, train
//	}
//	if err := st.Err(); err != nil { ... }
package data
