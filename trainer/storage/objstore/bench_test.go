package objstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
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

// BenchmarkGetRanged compares GetRanged (ranges of a part, Concurrency at
// once) with Get (one stream) reading the same 64 MiB object, in turn and
// in alternating order, through a relay that serves each connection at
// the rate given (per-conn), as S3 does, and at no limit. Metric
// ranged/get is Get's time over GetRanged's, the median over iterations:
// how many times faster the ranged read is.
func BenchmarkGetRanged(b *testing.B) {
	srv := s3test.Start(b)
	relay := s3test.NewRelay(b, srv.Endpoint)
	ctx := context.Background()
	client := s3.New(s3.Options{
		BaseEndpoint: aws.String(relay.Endpoint), Region: srv.Region, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, ""),
	})
	st, err := New(client, Location{Bucket: srv.Bucket, Prefix: "bench"}, Config{})
	if err != nil {
		b.Fatal(err)
	}
	payload := randomBytes(64<<20, 64)
	if _, err := st.Put(ctx, "model.bin", bytes.NewReader(payload)); err != nil {
		b.Fatal(err)
	}
	read := func(get func(context.Context, string) (io.ReadCloser, ObjectInfo, error)) error {
		rc, _, err := get(ctx, "model.bin")
		if err != nil {
			return err
		}
		defer rc.Close()
		n, err := io.Copy(io.Discard, rc)
		if err == nil && n != int64(len(payload)) {
			err = fmt.Errorf("read %d bytes of %d", n, len(payload))
		}
		return err
	}
	for _, rate := range []int64{0, 100e6, 25e6} {
		name := "per-conn=none"
		if rate > 0 {
			name = fmt.Sprintf("per-conn=%dMBps", rate/1e6)
		}
		b.Run(name, func(b *testing.B) {
			relay.LimitEach(rate)
			defer relay.LimitEach(0)
			var ratios []float64
			b.SetBytes(int64(len(payload)))
			for i := range b.N {
				var took [2]time.Duration // ranged, plain
				for j := range 2 {
					k := (i + j) % 2 // alternate which goes first
					get := st.GetRanged
					if k == 1 {
						get = st.Get
					}
					start := time.Now()
					if err := read(get); err != nil {
						b.Fatal(err)
					}
					took[k] = time.Since(start)
				}
				ratios = append(ratios, float64(took[1])/float64(took[0]))
			}
			slices.Sort(ratios)
			b.ReportMetric(ratios[len(ratios)/2], "ranged/get")
		})
	}
}
