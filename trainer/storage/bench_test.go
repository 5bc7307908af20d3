package storage

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writePayload writes payload into dir as n files of equal size, flushing
// each file when syncEach is set.
func writePayload(dir string, payload []byte, n int, syncEach bool) error {
	part := len(payload) / n
	for i := range n {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("shard-%d.bin", i)))
		if err != nil {
			return err
		}
		_, err = f.Write(payload[i*part : (i+1)*part])
		if err == nil && syncEach {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkCheckpointCommit (B6) compares a checkpoint write (Stage, write
// the files, Commit) with raw writes of the same bytes under the same
// durability (write the files, fsync each, fsync the directory), measured
// in turn, in rotating order, in the same run. Metrics:
//
//   - ckpt/raw: checkpoint throughput over a raw writer that fsyncs its
//     files one after the other (the usual way);
//   - ckpt/raw-par: over a raw writer that fsyncs its files concurrently
//     as Commit does, which isolates the cost of the commit protocol itself
//     (staging directory, rename, two more directory fsyncs, the record).
//
// 1 means the protocol costs nothing.
func BenchmarkCheckpointCommit(b *testing.B) {
	const files = 4
	for _, size := range []int{1 << 20, 16 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			payload := make([]byte, size)
			rand.NewChaCha8([32]byte{6}).Read(payload)
			root := b.TempDir()
			r, err := Open(root, "bench", Policy{Fsync: FsyncCheckpointRecords})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			rawWriter := func(parallel bool) func(int) error {
				return func(i int) error {
					dir := filepath.Join(root, fmt.Sprintf("raw-%t-%d", parallel, i))
					if err := os.Mkdir(dir, 0o755); err != nil {
						return err
					}
					if err := writePayload(dir, payload, files, !parallel); err != nil {
						return err
					}
					if parallel {
						return syncTree(dir)
					}
					return syncDir(dir)
				}
			}
			ckpt := func(i int) error {
				s, err := r.Stage()
				if err != nil {
					return err
				}
				if err := writePayload(s.Dir(), payload, files, false); err != nil {
					return err
				}
				_, err = r.Commit(s, Record{Step: int64(i)})
				return err
			}
			writers := []func(int) error{ckpt, rawWriter(false), rawWriter(true)}
			totals := make([]time.Duration, len(writers))
			b.SetBytes(int64(len(writers) * size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for k := range writers {
					w := (i + k) % len(writers)
					start := time.Now()
					if err := writers[w](i); err != nil {
						b.Fatal(err)
					}
					totals[w] += time.Since(start)
				}
				b.StopTimer()
				if err := clearBench(root, r); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			mibps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / (1 << 20) }
			b.ReportMetric(totals[1].Seconds()/totals[0].Seconds(), "ckpt/raw")
			b.ReportMetric(totals[2].Seconds()/totals[0].Seconds(), "ckpt/raw-par")
			b.ReportMetric(mibps(totals[0]), "ckpt-MiB/s")
			b.ReportMetric(mibps(totals[1]), "raw-MiB/s")
		})
	}
}

// clearBench removes the raw directories and the checkpoints between
// iterations so the disk holds one payload of each at a time.
func clearBench(root string, r *Run) error {
	raws, err := filepath.Glob(filepath.Join(root, "raw-*"))
	if err != nil {
		return err
	}
	for _, d := range raws {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.liveRecords() {
		if err := r.removeCheckpoint(rec.Checkpoint); err != nil {
			return err
		}
	}
	return nil
}
