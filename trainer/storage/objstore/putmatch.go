package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// ErrChanged is returned by PutIfMatch when the key no longer holds the
// object with the given ETag (another writer replaced or deleted it).
var ErrChanged = errors.New("object changed")

// PutIfMatch is Put with the condition If-Match: etag: it replaces the
// object at key only while it is the one with that ETag, atomically on
// servers that implement the condition (AWS S3 since 2024, versitygw
// 1.8). It returns ErrChanged when the object was replaced or deleted,
// and ErrConditionalUnsupported when the server answers that it does not
// implement the condition. It is for small objects (a lease): a body
// bigger than one part is refused.
func (s *Store) PutIfMatch(ctx context.Context, key, etag string, body io.Reader) (PutResult, error) {
	if err := checkKey(key); err != nil {
		return PutResult{}, fmt.Errorf("put: %w", err)
	}
	if etag == "" {
		return PutResult{}, fmt.Errorf("put %s: if-match with no etag", key)
	}
	data, err := io.ReadAll(io.LimitReader(body, s.cfg.PartSize+1))
	if err != nil {
		return PutResult{}, fmt.Errorf("put %s: read body: %w", key, err)
	}
	if int64(len(data)) > s.cfg.PartSize {
		return PutResult{}, fmt.Errorf("put %s: if-match body bigger than one part (%d bytes)", key, s.cfg.PartSize)
	}
	res := PutResult{Key: key, Size: int64(len(data)), SHA256: sha256.Sum256(data)}
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.loc.Bucket),
		Key:           aws.String(s.objectKey(key)),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		IfMatch:       aws.String(etag),
	}
	out, err := s.client.PutObject(ctx, in, s3.WithAPIOptions(withPayloadHash(res.SHA256[:])))
	if err != nil {
		return PutResult{}, fmt.Errorf("put %s if-match %s: %w", key, etag, changed(err))
	}
	res.ETag = aws.ToString(out.ETag)
	return res, nil
}

// changed maps the answers to a failed If-Match write: 412 (another
// object is there) and 404 (none is) are both ErrChanged.
func changed(err error) error {
	switch {
	case errorCode(err) == "PreconditionFailed", statusCode(err) == http.StatusPreconditionFailed,
		errorCode(err) == "NoSuchKey", statusCode(err) == http.StatusNotFound:
		return fmt.Errorf("%w: %w", ErrChanged, err)
	case errorCode(err) == "NotImplemented", statusCode(err) == http.StatusNotImplemented:
		return fmt.Errorf("%w: %w", ErrConditionalUnsupported, err)
	}
	return err
}

// DeleteIfMatch deletes the object at key only while it is the one with
// that ETag (If-Match on DeleteObject, where the server implements it:
// versitygw 1.8 does).
// It returns ErrChanged when another object is there or none is, and
// ErrConditionalUnsupported when the server answers that it does not
// implement the condition.
func (s *Store) DeleteIfMatch(ctx context.Context, key, etag string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	if etag == "" {
		return fmt.Errorf("delete %s: if-match with no etag", key)
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
		Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.objectKey(key)), IfMatch: aws.String(etag),
	})
	if err != nil {
		return fmt.Errorf("delete %s if-match %s: %w", key, etag, changed(err))
	}
	return nil
}
