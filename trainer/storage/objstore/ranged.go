package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// GetRanged opens an object for reading as Get does, for an object that
// may be big: it is asked for in ranges of PartSize, up to Concurrency
// of them on their way while the caller reads the one before, and read
// in order. S3 serves each connection at a rate of its own (AWS names
// ranged GETs as the way to a big object's throughput), so a checkpoint
// file comes down about as fast as its parts went up. Every range after
// the first is of the object the first came from (If-Match its ETag): an
// object replaced meanwhile fails the read with ErrChanged. Each range
// reads on where its connection broke, as Get's body does. An object of
// one part costs one request, as with Get. The body's Len is what is
// left of the object to read (Put sizes its parts by it).
func (s *Store) GetRanged(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("get: %w", err)
	}
	p := s.cfg.PartSize
	out, err := s.getObject(ctx, key, 0, p, "")
	if errorCode(err) == "InvalidRange" || statusCode(err) == http.StatusRequestedRangeNotSatisfiable {
		// An empty object has no first byte to ask for.
		rc, info, err := s.Get(ctx, key)
		if err != nil {
			return nil, ObjectInfo{}, err
		}
		return &sizedBody{ReadCloser: rc, left: info.Size}, info, nil
	}
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("get %s: %w", key, notFound(err))
	}
	info := ObjectInfo{Key: key, ETag: aws.ToString(out.ETag), LastModified: aws.ToTime(out.LastModified)}
	n := aws.ToInt64(out.ContentLength)
	total, ranged := rangeTotal(aws.ToString(out.ContentRange))
	if !ranged {
		total = n // a server that ignored the range sent the whole object
	}
	info.Size = total
	if out.ContentLength == nil || info.ETag == "" {
		if total > n {
			_ = out.Body.Close()
			return nil, ObjectInfo{}, fmt.Errorf("get %s: the server gave a range of %d bytes without its length or ETag", key, total)
		}
		return &sizedBody{ReadCloser: out.Body, left: total}, info, nil
	}
	first := &resumingBody{s: s, ctx: ctx, key: key, rc: out.Body, etag: info.ETag, end: n}
	if total <= n {
		return &sizedBody{ReadCloser: first, left: total}, info, nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	b := &rangedBody{s: s, ctx: ctx, cancel: cancel, key: key, etag: info.ETag, size: total, part: p,
		first: first, left: total, next: 1, tokens: make(chan struct{}, max(s.cfg.Concurrency, 1))}
	b.ready = make([]chan rangeChunk, (total+p-1)/p)
	for i := range b.ready {
		b.ready[i] = make(chan rangeChunk, 1)
	}
	b.wg.Go(b.dispatch)
	return b, info, nil
}

// rangeTotal reads the object's size from a Content-Range header
// ("bytes 0-8388607/104857600"); ok is false without one.
func rangeTotal(h string) (int64, bool) {
	_, total, found := strings.Cut(h, "/")
	if !found || !strings.HasPrefix(h, "bytes ") {
		return 0, false
	}
	n, err := strconv.ParseInt(total, 10, 64)
	return n, err == nil && n >= 0
}

// sizedBody is a body that says how much of it is left to read.
type sizedBody struct {
	io.ReadCloser
	left int64
}

func (b *sizedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// Len is the number of bytes left to read.
func (b *sizedBody) Len() int { return int(max(b.left, 0)) }

// rangedBody reads an object of more than one range: the first streamed
// as it comes, each later one read whole into a pooled buffer by a
// goroutine of its own, at most cap(tokens) of them ahead of the reader.
type rangedBody struct {
	s          *Store
	ctx        context.Context
	cancel     context.CancelCauseFunc
	key, etag  string
	size, part int64
	tokens     chan struct{} // one per later range fetched and not yet read
	ready      []chan rangeChunk
	wg         sync.WaitGroup

	// The reader's own:
	first *resumingBody // the first range, until read
	next  int           // the range to read after the current one
	buf   []byte        // the pooled buffer of the range being read
	cur   []byte        // its unread bytes
	left  int64
	err   error
}

type rangeChunk struct {
	buf  []byte // pooled, PartSize long
	data []byte // buf's bytes of the range
	err  error
}

// dispatch starts a fetch for each range after the first as a token
// frees, until every range is on its way or the body is closed.
func (b *rangedBody) dispatch() {
	for i := 1; i < len(b.ready); i++ {
		select {
		case b.tokens <- struct{}{}:
		case <-b.ctx.Done():
			return
		}
		b.wg.Go(func() { b.ready[i] <- b.fetch(int64(i) * b.part) })
	}
}

// fetch reads the range at off whole.
func (b *rangedBody) fetch(off int64) rangeChunk {
	n := min(b.part, b.size-off)
	c := rangeChunk{buf: b.s.getBuf(b.part)}
	out, err := b.s.getObject(b.ctx, b.key, off, n, b.etag)
	if err != nil {
		c.err = fmt.Errorf("get %s: range at byte %d: %w", b.key, off, changed(notFound(err)))
		return c
	}
	body := &resumingBody{s: b.s, ctx: b.ctx, key: b.key, rc: out.Body, etag: b.etag, off: off, end: off + n}
	defer body.Close()
	c.data = c.buf[:n]
	if _, err := io.ReadFull(body, c.data); err != nil {
		c.err = fmt.Errorf("get %s: range at byte %d: %w", b.key, off, err)
	}
	return c
}

func (b *rangedBody) Read(p []byte) (int, error) {
	if len(p) == 0 && b.err == nil {
		return 0, nil
	}
	for b.err == nil {
		if b.first != nil {
			n, err := b.first.Read(p)
			b.left -= int64(n)
			switch {
			case errors.Is(err, io.EOF):
				_ = b.first.Close()
				b.first = nil
			case err != nil:
				b.err = err
			}
			if n > 0 {
				return n, nil // an error comes with the next read
			}
			continue
		}
		if len(b.cur) > 0 {
			n := copy(p, b.cur)
			b.cur = b.cur[n:]
			b.left -= int64(n)
			return n, nil
		}
		if b.buf != nil {
			b.s.putBuf(b.buf)
			b.buf = nil
			<-b.tokens
		}
		if b.next == len(b.ready) {
			b.err = io.EOF
			break
		}
		select {
		case c := <-b.ready[b.next]:
			b.next++
			b.buf, b.cur, b.err = c.buf, c.data, c.err
		case <-b.ctx.Done():
			b.err = context.Cause(b.ctx)
		}
	}
	return 0, b.err
}

// Len is the number of bytes left to read.
func (b *rangedBody) Len() int { return int(max(b.left, 0)) }

// Close stops the fetches still on their way and gives back their
// buffers.
func (b *rangedBody) Close() error {
	b.cancel(errClosed)
	b.wg.Wait()
	if b.first != nil {
		_ = b.first.Close()
	}
	if b.buf != nil {
		b.s.putBuf(b.buf)
		b.buf = nil
	}
	for _, ch := range b.ready[b.next:] {
		select {
		case c := <-ch:
			b.s.putBuf(c.buf)
		default:
		}
	}
	b.next = len(b.ready)
	if b.err == nil {
		b.err = errClosed
	}
	return nil
}

var errClosed = errors.New("body closed")
