package objstore

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// ObjectInfo describes one object.
type ObjectInfo struct {
	// Key is relative to the store's prefix.
	Key          string
	Size         int64
	ETag         string
	LastModified time.Time
}

// Head returns an object's description, or ErrNotFound.
func (s *Store) Head(ctx context.Context, key string) (ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return ObjectInfo{}, fmt.Errorf("head: %w", err)
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.objectKey(key)),
	})
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("head %s: %w", key, notFound(err))
	}
	return ObjectInfo{
		Key: key, Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag),
		LastModified: aws.ToTime(out.LastModified),
	}, nil
}

// Get opens an object for reading, or returns ErrNotFound. The caller
// closes the body.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	return s.get(ctx, key, "")
}

// GetRange opens length bytes of an object from offset; a negative length
// reads to the end. A range past the end fails.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, ObjectInfo, error) {
	if offset < 0 || length == 0 {
		return nil, ObjectInfo{}, fmt.Errorf("get %s: bad range offset %d length %d", key, offset, length)
	}
	rng := fmt.Sprintf("bytes=%d-", offset)
	if length > 0 {
		rng += fmt.Sprint(offset + length - 1)
	}
	return s.get(ctx, key, rng)
}

func (s *Store) get(ctx context.Context, key, rng string) (io.ReadCloser, ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("get: %w", err)
	}
	in := &s3.GetObjectInput{Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.objectKey(key))}
	if rng != "" {
		in.Range = aws.String(rng)
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("get %s: %w", key, notFound(err))
	}
	return out.Body, ObjectInfo{
		Key: key, Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag),
		LastModified: aws.ToTime(out.LastModified),
	}, nil
}
