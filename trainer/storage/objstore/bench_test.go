package objstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nomad-train/nomad-train/internal/s3test"
)

// BenchmarkPutVsPlain (B6s, its upload half) compares Put (one pass that
// hashes with SHA-256 and sends parts in parallel) with one plain
// PutObject of the same bytes to the same server, measured in turn, in
// alternating order, in the same run. Metric put/plain is the plain PUT's
// time over Put's, the median over iterations of the ratio within one
// iteration: throughput relative to the plain PUT, 1 meaning Put costs
// nothing more. The 256 MiB case is skipped under -short.
//
// A checkpoint commit will add a manifest PUT on top; the B6s goal
// (>= 0.9) is for the whole commit.
func BenchmarkPutVsPlain(b *testing.B) {
	srv := s3test.Start(b)
	ctx := context.Background()
	client := srv.Client(b)
	st, err := New(client, Location{Bucket: srv.Bucket, Prefix: "bench"}, Config{})
	if err != nil {
		b.Fatal(err)
	}
	for _, mib := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			if mib > 16 && testing.Short() {
				b.Skip("256 MiB is skipped under -short")
			}
			payload := randomBytes(mib<<20, uint64(mib))
			ours := func(i int) error {
				_, err := st.Put(ctx, fmt.Sprintf("put/%d", i), bytes.NewReader(payload))
				return err
			}
			plain := func(i int) error {
				_, err := client.PutObject(ctx, &s3.PutObjectInput{
					Bucket: aws.String(srv.Bucket), Key: aws.String(fmt.Sprintf("bench/plain/%d", i)),
					Body: bytes.NewReader(payload), ContentLength: aws.Int64(int64(len(payload))),
				})
				return err
			}
			var ratios []float64
			var oursTotal, plainTotal time.Duration
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			for i := range b.N {
				order := []func(int) error{ours, plain}
				if i%2 == 1 {
					order = []func(int) error{plain, ours}
				}
				var took [2]time.Duration
				for j, f := range order {
					start := time.Now()
					if err := f(i); err != nil {
						b.Fatal(err)
					}
					took[j] = time.Since(start)
				}
				if i%2 == 1 {
					took[0], took[1] = took[1], took[0]
				}
				oursTotal += took[0]
				plainTotal += took[1]
				ratios = append(ratios, float64(took[1])/float64(took[0]))
			}
			b.StopTimer()
			slices.Sort(ratios)
			b.ReportMetric(ratios[len(ratios)/2], "put/plain")
			b.ReportMetric(float64(len(payload))*float64(b.N)/oursTotal.Seconds()/1e6, "put-MB/s")
			b.ReportMetric(float64(len(payload))*float64(b.N)/plainTotal.Seconds()/1e6, "plain-MB/s")
		})
	}
}
