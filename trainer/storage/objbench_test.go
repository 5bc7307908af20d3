package storage

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// BenchmarkCommitVsPlainPut (B6s) compares an ObjectRun commit of a
// one-file checkpoint with one plain PutObject of the same bytes to the
// same server, in turn and in alternating order, the commit through a
// store opened as a worker's is, the PUT with the SDK's defaults. The
// commit is what
// returns to its caller: files too big for the manifest uploaded with
// SHA-256 in the same pass, the manifest written with a conditional
// write (carrying a checkpoint of at most 4 MiB inside it), the lease
// checked meanwhile; the progress record and retention go on in the
// background and overlap the next iterations. In the -ranks cases it is
// the commit of a gang whose writer (rank 0) holds the file: Reserve,
// RankStore.UploadLarge, CommitFiles. Metric commit/plain is the plain
// PUT's time over the commit's, the median of the per-iteration ratios:
// 1 means the commit costs nothing over the bytes' upload; the goal is
// >= 0.9. Staging the file locally is not timed, nor, from 64 MiB up, a
// flush of the machine's dirty pages before each request. 256 MiB is
// skipped under -short.
func BenchmarkCommitVsPlainPut(b *testing.B) {
	srv := s3test.Start(b)
	ctx := context.Background()
	client := srv.Client(b) // the plain PUT's: the SDK's defaults
	// The commit's store is opened as a worker's is, its connections
	// watched for stalls (objstore.Config.StallTimeout).
	srv.SetKeys(b)
	st, err := objstore.Open(ctx, "s3://"+srv.Bucket+"/bench", objstore.Config{Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		mib   int
		ranks bool
	}{{1, false}, {1, true}, {16, false}, {16, true}, {256, false}, {256, true}} {
		mib := c.mib
		name := fmt.Sprintf("%dMiB", mib)
		if c.ranks {
			name += "-ranks"
		}
		b.Run(name, func(b *testing.B) {
			if mib > 16 && testing.Short() {
				b.Skip("256 MiB is skipped under -short")
			}
			payload := make([]byte, mib<<20)
			_, _ = rand.NewChaCha8([32]byte{byte(mib)}).Read(payload)
			benchRuns++ // a fresh run each time (-count, calibration)
			run := fmt.Sprintf("%s%d", strings.ReplaceAll(name, "-", ""), benchRuns)
			r, err := OpenObject(ctx, st, run, Policy{NumToKeep: benchKeep}, WithLocalDir(b.TempDir()))
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			rank, err := NewRankStore(ctx, st, run, b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			commit := func(i int) (time.Duration, error) {
				if c.ranks {
					return rankCommit(r, rank, payload, int64(i), b.TempDir())
				}
				s, err := r.Stage()
				if err != nil {
					return 0, err
				}
				if err := os.WriteFile(filepath.Join(s.Dir(), "model.bin"), payload, 0o644); err != nil {
					return 0, err
				}
				start := time.Now()
				_, err = r.Commit(s, Record{Step: int64(i)})
				return time.Since(start), err
			}
			plain := func(i int) (time.Duration, error) {
				start := time.Now()
				_, err := client.PutObject(ctx, &s3.PutObjectInput{
					Bucket: aws.String(srv.Bucket), Key: aws.String(fmt.Sprintf("bench/plain/%d", i%2)),
					Body: bytes.NewReader(payload), ContentLength: aws.Int64(int64(len(payload))),
				})
				return time.Since(start), err
			}
			var ratios []float64
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			for i := range b.N {
				order := []func(int) (time.Duration, error){commit, plain}
				if i%2 == 1 {
					order = []func(int) (time.Duration, error){plain, commit}
				}
				var took [2]time.Duration
				for j, f := range order {
					if mib >= 64 {
						// Untimed: the pages earlier requests dirtied are
						// flushed first. At 256 MiB an iteration writes
						// more than a gigabyte (the file, the server's
						// parts, its completed object, the plain object),
						// and without a flush their writeback throttled
						// later requests: the second sub-benchmark of a
						// process measured 0.83-0.94 where either alone
						// measured 1.27-1.32.
						syscall.Sync()
					}
					if took[j], err = f(i); err != nil {
						b.Fatal(err)
					}
				}
				if i%2 == 1 {
					took[0], took[1] = took[1], took[0]
				}
				ratios = append(ratios, float64(took[1])/float64(took[0]))
			}
			b.StopTimer()
			slices.Sort(ratios)
			b.ReportMetric(ratios[len(ratios)/2], "commit/plain")
		})
	}
}

// benchKeep is the retention of the benchmark's run: 1, so that each
// commit also deletes the previous checkpoint, as a long run's do.
var benchKeep = 1

// benchRuns numbers the benchmark's runs on its server.
var benchRuns int

// rankCommit commits a one-file checkpoint as a gang does, the file
// rank 0's, and times it from the reservation on.
func rankCommit(r *ObjectRun, rank *RankStore, payload []byte, step int64, dir string) (time.Duration, error) {
	if err := os.WriteFile(filepath.Join(dir, "model.bin"), payload, 0o644); err != nil {
		return 0, err
	}
	start := time.Now()
	name, err := r.Reserve()
	if err != nil {
		return 0, err
	}
	files, own, err := rank.UploadLarge(name, dir)
	if err != nil {
		return 0, err
	}
	err = r.CommitFiles(name, Record{Step: step}, files, own)
	took := time.Since(start)
	os.RemoveAll(filepath.Join(rank.LocalDir(), name)) // the node's copy, not timed
	return took, err
}
