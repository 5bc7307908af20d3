package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
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
// closes the body. A body whose connection fails part-way is read on from
// where it broke (resumingBody).
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	return s.get(ctx, key, 0, -1)
}

// GetRange opens length bytes of an object from offset; a negative length
// reads to the end. A range past the end fails.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, ObjectInfo, error) {
	if offset < 0 || length == 0 {
		return nil, ObjectInfo{}, fmt.Errorf("get %s: bad range offset %d length %d", key, offset, length)
	}
	return s.get(ctx, key, offset, length)
}

func (s *Store) get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("get: %w", err)
	}
	out, err := s.getObject(ctx, key, offset, length, "")
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("get %s: %w", key, notFound(err))
	}
	info := ObjectInfo{
		Key: key, Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag),
		LastModified: aws.ToTime(out.LastModified),
	}
	if out.ContentLength == nil || info.ETag == "" {
		return out.Body, info, nil
	}
	return &resumingBody{s: s, ctx: ctx, key: key, rc: out.Body, etag: info.ETag,
		off: offset, end: offset + info.Size}, info, nil
}

// getObject asks for length bytes of key from offset (a negative length:
// to the end), of the object whose ETag is ifMatch when that is set.
func (s *Store) getObject(ctx context.Context, key string, offset, length int64, ifMatch string) (*s3.GetObjectOutput, error) {
	in := &s3.GetObjectInput{Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.objectKey(key))}
	if offset > 0 || length > 0 {
		rng := fmt.Sprintf("bytes=%d-", offset)
		if length > 0 {
			rng += fmt.Sprint(offset + length - 1)
		}
		in.Range = aws.String(rng)
	}
	if ifMatch != "" {
		in.IfMatch = aws.String(ifMatch)
	}
	return s.client.GetObject(ctx, in)
}

// resumingBody is an object's body that, when its connection fails
// part-way (a stall, a reset, a server restart cutting it short), asks
// for the rest of the same object (a ranged GET, If-Match its ETag) and
// reads on, so that a big download outlives a short outage as a request
// does (for Config.RetryFor, or DefaultResumeFor without it, of failing
// without a byte read). A changed object, or the caller's context done,
// ends it with the error.
type resumingBody struct {
	s        *Store
	ctx      context.Context
	key      string
	rc       io.ReadCloser
	etag     string
	off, end int64     // the next byte's offset; the end of what was asked for
	failing  time.Time // when reads began failing without a byte read
	failures int       // reads failed since the last byte read
	broken   error     // how the last read, which returned bytes, ended
}

func (b *resumingBody) Read(p []byte) (int, error) {
	for {
		var n int
		err := b.broken
		if err == nil {
			n, err = b.rc.Read(p)
		}
		b.off += int64(n)
		b.broken = nil
		if n > 0 {
			b.failing, b.failures = time.Time{}, 0
		}
		switch {
		case err == nil:
			return n, nil
		case err == io.EOF && b.off >= b.end:
			return n, io.EOF
		case n > 0:
			b.broken = err // bytes first; the break is handled next read
			return n, nil
		case err == io.EOF:
			err = io.ErrUnexpectedEOF // the server ended it short
		}
		if b.ctx.Err() != nil {
			return 0, err
		}
		b.failures++
		if b.failures == 1 {
			b.failing = time.Now()
		} else if time.Since(b.failing) > b.s.resumeFor() {
			return 0, fmt.Errorf("get %s: broken at byte %d, %d times in a row: %w", b.key, b.off, b.failures, err)
		}
		if err := b.reopen(err); err != nil {
			return 0, err
		}
	}
}

// reopen asks for the rest of the object after cause broke the body,
// backing off as a retried request does when it broke more than once
// without a byte read in between. A request that fails for a reason that
// may pass leaves the body failing with it, for the next round; one for
// the object (replaced, deleted) or the caller's context ends the read.
func (b *resumingBody) reopen(cause error) error {
	_ = b.rc.Close()
	b.rc = io.NopCloser(strings.NewReader(""))
	var wait time.Duration
	if b.failures > 1 {
		wait = nominalWait(b.failures - 1)
	}
	if b.s.cfg.OnRetry != nil {
		b.s.cfg.OnRetry(b.failures, fmt.Errorf("reading %s broke at byte %d: %w", b.key, b.off, cause), wait)
	}
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-b.ctx.Done():
			return cause
		}
	}
	out, err := b.s.getObject(b.ctx, b.key, b.off, b.end-b.off, b.etag)
	if err != nil {
		// An If-Match read: changed maps its 412 and 404 as it does a write's.
		err = fmt.Errorf("get %s: reading on from byte %d after %v: %w", b.key, b.off, cause, changed(notFound(err)))
		if b.ctx.Err() != nil || errors.Is(err, ErrChanged) {
			return err
		}
		b.broken = err
		return nil
	}
	b.rc = out.Body
	return nil
}

func (b *resumingBody) Close() error { return b.rc.Close() }

// DefaultResumeFor is how long a store without Config.RetryFor goes on
// reading a broken body on.
const DefaultResumeFor = time.Minute

// resumeFor is how long a broken body is read on without a byte read:
// RetryFor, or for a store without it (a command a person waits on, whose
// download should not fail for a blip) DefaultResumeFor.
func (s *Store) resumeFor() time.Duration {
	if s.cfg.RetryFor > 0 {
		return s.cfg.RetryFor
	}
	return DefaultResumeFor
}
