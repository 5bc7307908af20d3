package storage

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
)

// BenchmarkFollow measures what one look of an open dashboard page costs,
// by the length of the run's history: follow (a Follower's Next when
// nothing is new, what a page pays every interval) against reread (a
// fresh read-only store's Records, what a reader that keeps no cursor
// pays), on a directory and on a real S3 server. Following should not
// grow with the history; rereading does.
func BenchmarkFollow(b *testing.B) {
	for _, backend := range []string{"fs", "s3"} {
		b.Run(backend, func(b *testing.B) {
			root, opts := benchRoot(b, backend)
			for _, n := range []int{100, 1000} {
				ctx := context.Background()
				run := fmt.Sprintf("r%d", n)
				w, err := OpenStore(ctx, root, run, Policy{}, append(opts, WithLocalDir(b.TempDir()))...)
				if err != nil {
					b.Fatal(err)
				}
				for s := range int64(n) {
					if err := w.Append(Record{Step: s, Metrics: map[string]any{"loss": 1 / float64(s+1)}}); err != nil {
						b.Fatal(err)
					}
				}
				b.Run(fmt.Sprintf("history=%d/follow", n), func(b *testing.B) {
					f, err := Follow(ctx, root, run, opts...)
					if err != nil {
						b.Fatal(err)
					}
					defer f.Close()
					if got, err := f.Next(); err != nil || len(got.Records) != n {
						b.Fatalf("first look: %d records, %v", len(got.Records), err)
					}
					for b.Loop() {
						if got, err := f.Next(); err != nil || len(got.Records) != 0 {
							b.Fatalf("%d records, %v", len(got.Records), err)
						}
					}
				})
				b.Run(fmt.Sprintf("history=%d/reread", n), func(b *testing.B) {
					for b.Loop() {
						r, err := OpenStoreReadOnly(ctx, root, run, Policy{}, opts...)
						if err != nil {
							b.Fatal(err)
						}
						if recs, err := r.Records(); err != nil || len(recs) != n {
							b.Fatalf("%d records, %v", len(recs), err)
						}
						r.Close()
					}
				})
				w.Close()
			}
		})
	}
}

// benchRoot is a storage path on the named backend, with its options.
func benchRoot(b *testing.B, backend string) (string, []Option) {
	if backend == "fs" {
		return b.TempDir(), nil
	}
	srv := s3test.Start(b)
	b.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	b.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	b.Setenv("AWS_CONFIG_FILE", filepath.Join(b.TempDir(), "none"))
	b.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(b.TempDir(), "none"))
	return "s3://" + srv.Bucket + "/runs", []Option{WithObjectConfig(objstore.Config{
		Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true})}
}
