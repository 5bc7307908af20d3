package data

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
)

// Source is random access to the records of a data set on files: Len
// records, record i appended to dst by Record. Sources are used by one
// goroutine at a time.
type Source interface {
	Len() int
	Record(i int, dst []byte) ([]byte, error)
}

// StreamSplit splits a Source among the workers of a gang the way Ray
// Data's streaming_split does: each rank reads only its own part of every
// epoch, from the files, on a read-ahead goroutine, instead of loading the
// whole data set.
//
// The epoch's order is pure arithmetic on (Seed, epoch): the records are
// cut into blocks of BlockSize consecutive records, the blocks are
// permuted (when Shuffle is set), and the records of the permuted blocks,
// in order, form the epoch's sequence. Rank r takes the r-th of WorldSize
// equal contiguous slices of that sequence (the last Len mod WorldSize
// records are left out, so every rank has the same number of batches), so
// it reads about Len/WorldSize records in few contiguous runs. Within its
// slice the records pass through a shuffle buffer of ShuffleBuffer
// records seeded by (Seed, epoch, rank).
//
// Because the split depends on WorldSize only through the final slicing,
// a run restarted with a different world size gets shards that are again
// disjoint and cover the epoch.
type StreamSplit struct {
	Source          Source
	Rank, WorldSize int
	Shuffle         bool
	Seed            int64
	// BlockSize is the number of consecutive records read as one run
	// (default 256).
	BlockSize int
	// ShuffleBuffer is the size of the local shuffle window (default 2048;
	// 1 keeps the epoch's sequence order).
	ShuffleBuffer int
	// ReadAhead is how many batches the reader may have ready before the
	// consumer takes them (default 2).
	ReadAhead int
}

// ErrStreamConfig is wrapped by StreamSplit's configuration errors.
var ErrStreamConfig = errors.New("invalid stream split")

func (s StreamSplit) validate() error {
	switch {
	case s.Source == nil:
		return fmt.Errorf("%w: no source", ErrStreamConfig)
	case s.WorldSize < 1 || s.Rank < 0 || s.Rank >= s.WorldSize:
		return fmt.Errorf("%w: rank %d of %d", ErrStreamConfig, s.Rank, s.WorldSize)
	}
	return nil
}

func (s StreamSplit) blockSize() int { return defaultInt(s.BlockSize, 256) }

func defaultInt(v, def int) int {
	if v < 1 {
		return def
	}
	return v
}

// NumSamples is the number of records each rank gets per epoch.
func (s StreamSplit) NumSamples() int { return s.Source.Len() / s.WorldSize }

// Run is a range [Start, End) of consecutive record indices.
type Run struct{ Start, End int }

// Runs returns this rank's record runs for epoch, in reading order, before
// the local shuffle. It does no I/O.
func (s StreamSplit) Runs(epoch int) []Run {
	n, bs := s.Source.Len(), s.blockSize()
	nb := (n + bs - 1) / bs
	order := make([]int, nb)
	for i := range order {
		order[i] = i
	}
	if s.Shuffle {
		rand.New(rand.NewPCG(uint64(s.Seed), uint64(epoch))).Shuffle(nb, func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	per := n / s.WorldSize
	lo, hi := s.Rank*per, (s.Rank+1)*per // positions in the epoch's sequence
	var runs []Run
	pos := 0
	for _, b := range order {
		start, end := b*bs, min((b+1)*bs, n)
		bl := end - start
		if pos+bl > lo && pos < hi {
			a, z := max(lo-pos, 0), min(hi-pos, bl)
			if k := len(runs) - 1; k >= 0 && runs[k].End == start+a {
				runs[k].End = start + z // adjacent blocks read as one run
			} else {
				runs = append(runs, Run{start + a, start + z})
			}
		}
		pos += bl
		if pos >= hi {
			break
		}
	}
	return runs
}

// Indices returns this rank's record indices for epoch in the order
// batches deliver them (after the local shuffle). It does no I/O.
func (s StreamSplit) Indices(epoch int) []int {
	var seq []int
	for _, r := range s.Runs(epoch) {
		for i := r.Start; i < r.End; i++ {
			seq = append(seq, i)
		}
	}
	return s.localShuffle(epoch, seq)
}

// localShuffle passes seq through a shuffle buffer: fill the buffer, then
// for each further element emit a random buffered one and put the new one
// in its place; finally drain the buffer in random order.
func (s StreamSplit) localShuffle(epoch int, seq []int) []int {
	size := defaultInt(s.ShuffleBuffer, 2048)
	if !s.Shuffle || size == 1 {
		return seq
	}
	rng := rand.New(rand.NewPCG(uint64(s.Seed)^0x9e3779b97f4a7c15, uint64(epoch)<<20|uint64(s.Rank)))
	out := make([]int, 0, len(seq))
	buf := make([]int, 0, size)
	for _, v := range seq {
		if len(buf) < size {
			buf = append(buf, v)
			continue
		}
		j := rng.IntN(size)
		out = append(out, buf[j])
		buf[j] = v
	}
	rng.Shuffle(len(buf), func(i, j int) { buf[i], buf[j] = buf[j], buf[i] })
	return append(out, buf...)
}

// Batch is one batch of records: Records[i] is the bytes of record
// Indices[i].
type Batch struct {
	Indices []int
	Records [][]byte
}

// Stream is one epoch of one rank being read ahead. Call Next until it
// returns false, then Err; Close stops the reader early.
type Stream struct {
	ch     chan Batch
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set by the reader before done closes
}

// Epoch starts reading this rank's records of epoch in batches of
// batchSize (the last may be shorter) on a goroutine that stays up to
// ReadAhead batches ahead of the consumer.
func (s StreamSplit) Epoch(ctx context.Context, epoch, batchSize int) (*Stream, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if batchSize < 1 {
		return nil, fmt.Errorf("%w: batch size %d", ErrStreamConfig, batchSize)
	}
	idx := s.Indices(epoch)
	ctx, cancel := context.WithCancel(ctx)
	st := &Stream{ch: make(chan Batch, defaultInt(s.ReadAhead, 2)), cancel: cancel, done: make(chan struct{})}
	go st.read(ctx, s.Source, idx, batchSize)
	return st, nil
}

func (st *Stream) read(ctx context.Context, src Source, idx []int, batchSize int) {
	defer close(st.done)
	defer close(st.ch)
	for _, b := range Batches(idx, batchSize) {
		batch := Batch{Indices: b, Records: make([][]byte, len(b))}
		var buf []byte
		for k, i := range b {
			var err error
			start := len(buf)
			if buf, err = src.Record(i, buf); err != nil {
				st.err = err
				return
			}
			batch.Records[k] = buf[start:len(buf):len(buf)]
		}
		// Records alias buf; a later append that reallocates leaves the
		// earlier records on the old array, which is still correct.
		select {
		case st.ch <- batch:
		case <-ctx.Done():
			st.err = ctx.Err()
			return
		}
	}
}

// Next returns the next batch, or false at the end of the epoch or after
// an error (see Err).
func (st *Stream) Next() (Batch, bool) {
	b, ok := <-st.ch
	return b, ok
}

// Err is the reader's error once Next has returned false.
func (st *Stream) Err() error {
	<-st.done
	return st.err
}

// Close stops the reader and waits for it to exit.
func (st *Stream) Close() {
	st.cancel()
	for range st.ch {
	}
	<-st.done
}
