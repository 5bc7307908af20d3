package objstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// deleteBatch is S3's limit on keys in one DeleteObjects request.
const deleteBatch = 1000

// ListOptions selects the objects List returns.
type ListOptions struct {
	// Prefix keeps keys that start with it ("" for all).
	Prefix string
	// StartAfter keeps keys after it in byte order: pass the last key of
	// the previous call to read only what is new.
	StartAfter string
	// Limit stops after this many objects; zero means no limit.
	Limit int
}

// List returns the objects under a prefix in key order, after a cursor,
// requesting ListPageSize keys at a time.
func (s *Store) List(ctx context.Context, opts ListOptions) ([]ObjectInfo, error) {
	in := &s3.ListObjectsV2Input{
		Bucket: aws.String(s.loc.Bucket),
		Prefix: aws.String(s.objectKey(opts.Prefix)),
	}
	if opts.StartAfter != "" {
		in.StartAfter = aws.String(s.objectKey(opts.StartAfter))
	}
	if s.cfg.ListPageSize > 0 {
		in.MaxKeys = aws.Int32(s.cfg.ListPageSize)
	}
	var objs []ObjectInfo
	for {
		out, err := s.client.ListObjectsV2(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", opts.Prefix, notFound(err))
		}
		for _, o := range out.Contents {
			objs = append(objs, ObjectInfo{
				Key: s.storeKey(aws.ToString(o.Key)), Size: aws.ToInt64(o.Size),
				ETag: aws.ToString(o.ETag), LastModified: aws.ToTime(o.LastModified),
			})
			if opts.Limit > 0 && len(objs) == opts.Limit {
				return objs, nil
			}
		}
		if !aws.ToBool(out.IsTruncated) || aws.ToString(out.NextContinuationToken) == "" {
			return objs, nil
		}
		in.ContinuationToken = out.NextContinuationToken
	}
}

// Delete removes an object. Removing a missing object is not an error
// (S3 answers both the same).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
		Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.objectKey(key)),
	})
	if err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// DeleteMany removes objects in batches of 1000 keys, in the order given.
// It returns every key's failure, joined.
func (s *Store) DeleteMany(ctx context.Context, keys []string) error {
	var errs []error
	for start := 0; start < len(keys); start += deleteBatch {
		batch := keys[start:min(start+deleteBatch, len(keys))]
		ids := make([]types.ObjectIdentifier, len(batch))
		for i, k := range batch {
			if err := checkKey(k); err != nil {
				return fmt.Errorf("delete many: %w", err)
			}
			ids[i] = types.ObjectIdentifier{Key: aws.String(s.objectKey(k))}
		}
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: aws.String(s.loc.Bucket),
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("delete %d keys from %s: %w", len(batch), batch[0], err))...)
		}
		for _, e := range out.Errors {
			errs = append(errs, fmt.Errorf("delete %s: %s: %s",
				s.storeKey(aws.ToString(e.Key)), aws.ToString(e.Code), aws.ToString(e.Message)))
		}
	}
	return errors.Join(errs...)
}

// Upload is a multipart upload that was started and neither completed nor
// aborted: the remains of a crashed Put, holding storage until aborted.
type Upload struct {
	Key       string
	ID        string
	Initiated time.Time
}

// ListMultipartUploads returns the unfinished multipart uploads of keys
// under a prefix.
func (s *Store) ListMultipartUploads(ctx context.Context, prefix string) ([]Upload, error) {
	in := &s3.ListMultipartUploadsInput{
		Bucket: aws.String(s.loc.Bucket),
		Prefix: aws.String(s.objectKey(prefix)),
	}
	if s.cfg.ListPageSize > 0 {
		in.MaxUploads = aws.Int32(s.cfg.ListPageSize)
	}
	var ups []Upload
	for {
		out, err := s.client.ListMultipartUploads(ctx, in)
		if err != nil && in.UploadIdMarker != nil && errorCode(err) == "InvalidArgument" {
			// versitygw 1.8 refuses an upload-id-marker whose key it has
			// already passed; page on the key alone there. Further uploads
			// of the page's last key are then found by the next listing.
			in.UploadIdMarker = nil
			out, err = s.client.ListMultipartUploads(ctx, in)
		}
		if err != nil {
			return nil, fmt.Errorf("list multipart uploads %s: %w", prefix, notFound(err))
		}
		for _, u := range out.Uploads {
			ups = append(ups, Upload{
				Key: s.storeKey(aws.ToString(u.Key)), ID: aws.ToString(u.UploadId),
				Initiated: aws.ToTime(u.Initiated),
			})
		}
		if !aws.ToBool(out.IsTruncated) {
			return ups, nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

// AbortMultipartUpload discards an unfinished upload and its parts. An
// upload that is already gone gives ErrNotFound.
func (s *Store) AbortMultipartUpload(ctx context.Context, key, id string) error {
	_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.objectKey(key)), UploadId: aws.String(id),
	})
	if err != nil {
		return fmt.Errorf("abort multipart upload %s of %s: %w", id, key, notFound(err))
	}
	return nil
}

// ProbeConditionalWrite reports whether the server refuses a second
// If-None-Match: "*" write to the same key. It writes and deletes one
// small object under key. A server that ignores the condition reports
// false, as does one that answers 501.
func (s *Store) ProbeConditionalWrite(ctx context.Context, key string) (bool, error) {
	defer func() { _ = s.Delete(context.WithoutCancel(ctx), key) }()
	if err := s.Delete(ctx, key); err != nil {
		return false, fmt.Errorf("probe conditional write: %w", err)
	}
	if _, err := s.PutIfAbsent(ctx, key, strings.NewReader("probe")); err != nil {
		if errors.Is(err, ErrConditionalUnsupported) {
			return false, nil
		}
		return false, fmt.Errorf("probe conditional write: %w", err)
	}
	_, err := s.PutIfAbsent(ctx, key, strings.NewReader("probe"))
	switch {
	case err == nil, errors.Is(err, ErrConditionalUnsupported):
		return false, nil
	case errors.Is(err, ErrExists):
		return true, nil
	}
	return false, fmt.Errorf("probe conditional write: %w", err)
}
