package storage

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
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
// Each ratio is the median over iterations of the ratio within one
// iteration, which rides out a disk shared with other work better than a
// ratio of totals. 1 means the protocol costs nothing. STORAGE_BENCH_DIR
// picks the filesystem (default: the test's temporary directory).
func BenchmarkCheckpointCommit(b *testing.B) {
	const files = 4
	for _, size := range []int{1 << 20, 16 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			payload := make([]byte, size)
			rand.NewChaCha8([32]byte{6}).Read(payload)
			root, err := os.MkdirTemp(os.Getenv("STORAGE_BENCH_DIR"), "bench-")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(root)
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
			var vsRaw, vsPar []float64
			b.SetBytes(int64(len(writers) * size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var took [3]time.Duration
				for k := range writers {
					w := (i + k) % len(writers)
					start := time.Now()
					if err := writers[w](i); err != nil {
						b.Fatal(err)
					}
					took[w] = time.Since(start)
					totals[w] += took[w]
				}
				vsRaw = append(vsRaw, took[1].Seconds()/took[0].Seconds())
				vsPar = append(vsPar, took[2].Seconds()/took[0].Seconds())
				b.StopTimer()
				if err := clearBench(root, r); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			mibps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / (1 << 20) }
			b.ReportMetric(median(vsRaw), "ckpt/raw")
			b.ReportMetric(median(vsPar), "ckpt/raw-par")
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

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
