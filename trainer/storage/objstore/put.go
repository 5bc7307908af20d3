package objstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// PutResult describes an object written by Put or PutIfAbsent.
type PutResult struct {
	Key  string
	Size int64
	// SHA256 is the digest of the bytes read from the body, computed while
	// uploading (one pass over the data).
	SHA256 [sha256.Size]byte
	ETag   string
	// Parts is the number of multipart parts, 0 for a single PutObject.
	Parts int
}

// Put uploads body to key, replacing any object there. A body no bigger
// than one part goes up in one PutObject; a bigger one as a multipart
// upload with Concurrency parts in flight. S3 allows 10,000 parts: past
// 10,000 parts of PartSize, parts grow (see partSize), for a body whose
// size Put can tell (a file, a bytes.Reader) from the start and
// otherwise as it goes. A failed multipart upload is aborted; one that
// cannot be (the process dies) is left for ListMultipartUploads and
// AbortMultipartUpload.
func (s *Store) Put(ctx context.Context, key string, body io.Reader) (PutResult, error) {
	return s.put(ctx, key, body, false)
}

// PutIfAbsent is Put with the condition If-None-Match: "*": it writes only
// when key holds no object, atomically on servers that implement the
// condition. It returns ErrExists when key holds one, and
// ErrConditionalUnsupported when the server answers that it does not
// implement the condition. When a single PutObject fails with no answer
// at all (a reset connection), a HEAD decides: ErrExists if key holds an
// object then. A server that ignores the header silently
// overwrites: ProbeConditionalWrite tells the two kinds apart. For a body
// bigger than one part the condition is checked when the upload is
// completed, after the parts are sent; a refused upload is aborted.
func (s *Store) PutIfAbsent(ctx context.Context, key string, body io.Reader) (PutResult, error) {
	return s.put(ctx, key, body, true)
}

func (s *Store) put(ctx context.Context, key string, body io.Reader, ifAbsent bool) (PutResult, error) {
	if err := checkKey(key); err != nil {
		return PutResult{}, fmt.Errorf("put: %w", err)
	}
	known := bodySize(body)
	h := sha256.New()
	r := io.TeeReader(body, h)
	first := s.getBuf(s.cfg.PartSize)
	n, err := io.ReadFull(r, first)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		s.putBuf(first)
		return PutResult{}, fmt.Errorf("put %s: read body: %w", key, err)
	}
	res := PutResult{Key: key}
	single := func(data []byte) (PutResult, error) {
		defer s.putBuf(first)
		h.Sum(res.SHA256[:0])
		if err := s.putSingle(ctx, key, bytes.NewReader(data), int64(len(data)), "", ifAbsent, &res); err != nil {
			return PutResult{}, err
		}
		return res, nil
	}
	if n < len(first) {
		return single(first[:n])
	}
	// A full first part: one more byte decides between one PutObject and
	// a multipart upload.
	var peek [1]byte
	if m, err := io.ReadFull(r, peek[:]); m == 0 {
		if !errors.Is(err, io.EOF) {
			s.putBuf(first)
			return PutResult{}, fmt.Errorf("put %s: read body: %w", key, err)
		}
		return single(first)
	}
	rest := io.MultiReader(bytes.NewReader(peek[:]), r)
	if err := s.putMultipart(ctx, key, first, rest, known, h, ifAbsent, &res); err != nil {
		return PutResult{}, err
	}
	return res, nil
}

// Body is an object of at most one part, hashed by its caller ahead of
// its write (BodyOf), so that the hashing can overlap other work. PutBody
// and PutBodyIfAbsent write it as Put and PutIfAbsent would, signed with
// that digest, and can hold its last byte back until a check that must
// pass before the object exists (a fence) has answered.
type Body struct {
	st   *Store
	data []byte
	sum  [sha256.Size]byte
	// crc is the CRC32 checksum header's value, computed here so that the
	// SDK need not read the body before sending it; "" when the client
	// sends checksums only where an operation requires them.
	crc string
}

// BodyOf makes a Body of data, whose SHA-256 the caller has computed in
// a pass of its own (a server refuses a body whose signed hash is not
// its own). data must not change while the Body is being written. A body
// bigger than one part is refused.
func (s *Store) BodyOf(data []byte, sum [sha256.Size]byte) (*Body, error) {
	if int64(len(data)) > s.cfg.PartSize {
		return nil, fmt.Errorf("body bigger than one part (%d bytes)", s.cfg.PartSize)
	}
	b := &Body{st: s, data: data, sum: sum}
	if s.client.Options().RequestChecksumCalculation != aws.RequestChecksumCalculationWhenRequired {
		b.crc = crc32Header(data)
	}
	return b, nil
}

// crc32Header is the x-amz-checksum-crc32 value of data: its CRC-32
// (IEEE), big-endian, in base64.
func crc32Header(data []byte) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE(data)))
}

// PartSize returns the size of the store's multipart parts: the most a
// Body holds.
func (s *Store) PartSize() int64 { return s.cfg.PartSize }

// PutBody writes b to key, replacing any object there. fence, when not
// nil, is asked before the body's last byte is sent, and the write
// completes only if it answers nil: the object cannot exist before the
// fence has passed, while the rest of the body is already on its way.
// Its error fails the write, which then creates no object, and is
// returned (errors.Is finds it); it may be asked more than once.
func (s *Store) PutBody(ctx context.Context, key string, b *Body, fence func() error) (PutResult, error) {
	return s.putBody(ctx, key, b, false, fence)
}

// PutBodyIfAbsent is PutBody that writes only when key holds no object
// (see PutIfAbsent).
func (s *Store) PutBodyIfAbsent(ctx context.Context, key string, b *Body, fence func() error) (PutResult, error) {
	return s.putBody(ctx, key, b, true, fence)
}

func (s *Store) putBody(ctx context.Context, key string, b *Body, ifAbsent bool, fence func() error) (PutResult, error) {
	if err := checkKey(key); err != nil {
		return PutResult{}, fmt.Errorf("put: %w", err)
	}
	if b.st != s {
		return PutResult{}, fmt.Errorf("put %s: body made by another store", key)
	}
	res := PutResult{Key: key, SHA256: b.sum}
	var body io.ReadSeeker = bytes.NewReader(b.data)
	switch {
	case fence == nil:
	case len(b.data) == 0: // no last byte to hold back
		if err := fence(); err != nil {
			return PutResult{}, fmt.Errorf("put %s: %w", key, err)
		}
	default:
		// A failed fence also cancels the request, so that the SDK does
		// not retry it.
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		body = &fencedReader{data: b.data, fence: func() error {
			err := fence()
			if err != nil {
				cancel(err)
			}
			return err
		}}
	}
	err := s.putSingle(ctx, key, body, int64(len(b.data)), b.crc, ifAbsent, &res)
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(err, cause) {
		err = fmt.Errorf("%w (%w)", cause, err)
	}
	if err != nil {
		return PutResult{}, err
	}
	return res, nil
}

// fencedReader reads data, but for its last byte, which it gives only
// once fence answers nil. It seeks, so that the SDK can send it again.
type fencedReader struct {
	data  []byte
	off   int
	fence func() error
}

func (r *fencedReader) Read(p []byte) (int, error) {
	last := len(r.data) - 1
	switch {
	case r.off > last:
		return 0, io.EOF
	case r.off == last:
		if err := r.fence(); err != nil {
			return 0, err
		}
		n := copy(p, r.data[last:])
		r.off += n
		return n, nil
	}
	n := copy(p, r.data[r.off:last])
	r.off += n
	return n, nil
}

func (r *fencedReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += int64(r.off)
	case io.SeekEnd:
		offset += int64(len(r.data))
	default:
		return 0, fmt.Errorf("seek: bad whence %d", whence)
	}
	if offset < 0 || offset > int64(len(r.data)) {
		return 0, fmt.Errorf("seek to %d: outside the body", offset)
	}
	r.off = int(offset)
	return offset, nil
}

// maxParts is S3's limit on parts in one upload (a variable for tests).
var maxParts int32 = 10000

// partSize is the size of multipart part num (from 1) of a body of known
// bytes (-1 when unknown): PartSize, or more where 10,000 parts of
// PartSize would not hold the body. A body of known size is cut, after
// its first part, into equal parts that 9,999 hold. The parts of one of
// unknown size, or of one past what it was known to hold, double every
// 1,000: 10,000 parts then hold 1,023,000 first parts (8 TiB at the
// default), past S3's 5 TiB object, and a body that fits 1,000 parts
// takes no more memory than before.
func (s *Store) partSize(num int32, known int64) int64 {
	base := s.cfg.PartSize
	if num <= 1 {
		return base // read before Put knows it has more than one
	}
	if known >= 0 {
		rest := known - base // after the first part
		if n := int64(maxParts - 1); rest > n*base {
			base = ((rest+n-1)/n + 1<<20 - 1) &^ (1<<20 - 1) // whole MiB
		}
		if int64(num-2)*base < rest {
			return min(base, MaxPartSize)
		}
	}
	return min(base<<min((num-1)/max(maxParts/10, 1), 20), MaxPartSize)
}

// bodySize is how many bytes body holds, if it can tell without reading
// it, and -1 otherwise.
func bodySize(body io.Reader) int64 {
	switch b := body.(type) {
	case interface{ Len() int }:
		return int64(b.Len())
	case *os.File:
		fi, err := b.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return -1
		}
		off, err := b.Seek(0, io.SeekCurrent)
		if err != nil || off > fi.Size() {
			return -1
		}
		return fi.Size() - off
	}
	return -1
}

// getBuf returns a part buffer of size bytes from the store's pools.
func (s *Store) getBuf(size int64) []byte {
	if b, ok := s.pool(int(size)).Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, size)
}

func (s *Store) putBuf(b []byte) {
	b = b[:cap(b)]
	s.pool(len(b)).Put(&b)
}

// pool is the pool of buffers of size bytes.
func (s *Store) pool(size int) *sync.Pool {
	s.bufMu.Lock()
	defer s.bufMu.Unlock()
	p, ok := s.bufs[size]
	if !ok {
		if s.bufs == nil {
			s.bufs = map[int]*sync.Pool{}
		}
		p = &sync.Pool{}
		s.bufs[size] = p
	}
	return p
}

// putSingle writes one PutObject whose body's SHA-256 is res.SHA256;
// crc, when not "", is its CRC32 checksum header.
func (s *Store) putSingle(ctx context.Context, key string, body io.ReadSeeker, size int64, crc string, ifAbsent bool, res *PutResult) error {
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.loc.Bucket),
		Key:           aws.String(s.objectKey(key)),
		Body:          body,
		ContentLength: aws.Int64(size),
	}
	if crc != "" {
		in.ChecksumCRC32 = aws.String(crc)
	}
	if ifAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := s.client.PutObject(ctx, in, s3.WithAPIOptions(withPayloadHash(res.SHA256[:])))
	if err != nil && ifAbsent && statusCode(err) == 0 && ctx.Err() == nil {
		err = s.existsAfter(ctx, key, err)
	}
	if err != nil {
		return fmt.Errorf("put %s: %w", key, conditional(err))
	}
	res.Size = size
	res.ETag = aws.ToString(out.ETag)
	return nil
}

// existsAfter asks whether key holds an object after a conditional
// PutObject failed with no answer from the server, and returns err marked
// with ErrExists when it does. A server may refuse such a write from its
// headers alone and close the connection without reading the body
// (versitygw does); the client, still sending, then sees a reset instead
// of the 412. As with a write retried after its answer was lost, the
// object found may be the one this write put.
func (s *Store) existsAfter(ctx context.Context, key string, err error) error {
	if _, herr := s.Head(ctx, key); herr != nil {
		return err
	}
	return fmt.Errorf("%w (found by a HEAD after the write failed): %w", ErrExists, err)
}

// part is one multipart part on its way to a worker.
type part struct {
	num  int32
	data []byte // a pooled buffer, returned after the upload
}

func (s *Store) putMultipart(ctx context.Context, key string, first []byte, rest io.Reader, known int64,
	h hash.Hash, ifAbsent bool, res *PutResult) error {
	objKey := s.objectKey(key)
	created, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket: aws.String(s.loc.Bucket), Key: aws.String(objKey),
	})
	if err != nil {
		return fmt.Errorf("put %s: start multipart upload: %w", key, err)
	}
	id := aws.ToString(created.UploadId)
	parts, size, err := s.uploadParts(ctx, key, id, first, rest, known)
	if err != nil {
		return s.abortAfter(ctx, key, id, err)
	}
	etag, err := s.complete(ctx, key, id, parts, size, ifAbsent)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	res.Size, res.Parts, res.ETag = size, len(parts), etag
	h.Sum(res.SHA256[:0])
	return nil
}

// complete completes multipart upload id of key from parts (in order,
// size bytes in all), If-None-Match when ifAbsent, and returns the
// object's ETag. A completion whose answer was lost is recognised
// (completedAfter); one that failed is aborted.
func (s *Store) complete(ctx context.Context, key, id string, parts []types.CompletedPart, size int64, ifAbsent bool) (string, error) {
	in := &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.objectKey(key)), UploadId: aws.String(id),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	}
	if ifAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := s.client.CompleteMultipartUpload(s.workingOn(ctx, size), in)
	if err == nil {
		return aws.ToString(out.ETag), nil
	}
	if etag, found := s.completedAfter(ctx, key, parts, size, err); found {
		return etag, nil
	}
	return "", s.abortAfter(ctx, key, id, fmt.Errorf("complete multipart upload: %w", conditional(err)))
}

// completedAfter says whether a completion that failed with NoSuchUpload
// had completed after all: an attempt the server took, whose answer was
// lost (a restart, a broken connection), and the SDK retried, finding the
// upload gone. It does if key now holds an object of size whose ETag is
// the one S3 gives an object made of exactly these parts, the MD5 of
// their MD5s and their count; that ETag is returned.
func (s *Store) completedAfter(ctx context.Context, key string, parts []types.CompletedPart, size int64, err error) (string, bool) {
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "NoSuchUpload" {
		return "", false
	}
	want, ok := multipartETag(parts)
	if !ok {
		return "", false
	}
	info, herr := s.Head(ctx, key)
	if herr != nil || info.Size != size || strings.Trim(info.ETag, `"`) != want {
		return "", false
	}
	return info.ETag, true
}

// multipartETag is the ETag S3 gives an object completed from parts (in
// order): the hex MD5 of the concatenated binary MD5s of the parts, a
// dash, and the number of parts. ok is false when a part's ETag is not a
// plain MD5.
func multipartETag(parts []types.CompletedPart) (string, bool) {
	h := md5.New()
	for _, p := range parts {
		sum, err := hex.DecodeString(strings.Trim(aws.ToString(p.ETag), `"`))
		if err != nil || len(sum) != md5.Size {
			return "", false
		}
		h.Write(sum)
	}
	return fmt.Sprintf("%x-%d", h.Sum(nil), len(parts)), true
}

// uploadParts reads the body part by part on this goroutine (so the
// digest sees the bytes in order) and uploads the parts on Concurrency
// workers. At most Concurrency+1 part buffers are in use at a time; first
// is one of them. known is the body's size, -1 when unknown (partSize).
func (s *Store) uploadParts(ctx context.Context, key, id string, first []byte, rest io.Reader, known int64) ([]types.CompletedPart, int64, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan part)
	tokens := make(chan struct{}, s.cfg.Concurrency+1)
	var (
		mu   sync.Mutex
		done []types.CompletedPart // guarded by mu
		wg   sync.WaitGroup
	)
	for range s.cfg.Concurrency {
		wg.Go(func() {
			for p := range jobs {
				if ctx.Err() == nil {
					cp, err := s.uploadPart(ctx, key, id, p)
					if err != nil {
						cancel(err)
					} else {
						mu.Lock()
						done = append(done, cp)
						mu.Unlock()
					}
				}
				s.putBuf(p.data)
				<-tokens
			}
		})
	}
	tokens <- struct{}{} // first's
	size, err := s.produceParts(ctx, key, first, rest, known, jobs, tokens)
	close(jobs)
	wg.Wait()
	if err == nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		return nil, 0, err
	}
	slices.SortFunc(done, func(a, b types.CompletedPart) int { return int(*a.PartNumber - *b.PartNumber) })
	return done, size, nil
}

// produceParts sends first and then the rest of the body as parts, taking
// a token for each buffer it fills; the workers give tokens back.
func (s *Store) produceParts(ctx context.Context, key string, first []byte, rest io.Reader, known int64,
	jobs chan<- part, tokens chan struct{}) (int64, error) {
	release := func(buf []byte) {
		s.putBuf(buf)
		<-tokens
	}
	send := func(p part) error {
		select {
		case jobs <- p:
			return nil
		case <-ctx.Done():
			release(p.data)
			return context.Cause(ctx)
		}
	}
	if err := send(part{num: 1, data: first}); err != nil {
		return 0, err
	}
	size := int64(len(first))
	for num := int32(2); ; num++ {
		select {
		case tokens <- struct{}{}:
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
		buf := s.getBuf(s.partSize(num, known))
		n, err := io.ReadFull(rest, buf)
		size += int64(n)
		switch {
		case n == 0:
			release(buf)
		case num > maxParts:
			release(buf)
			return 0, fmt.Errorf("put %s: body bigger than S3's %d parts hold (after %d bytes)", key, maxParts, size-int64(n))
		default:
			if err := send(part{num: num, data: buf[:n]}); err != nil {
				return 0, err
			}
		}
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return size, nil
		case err != nil:
			return 0, fmt.Errorf("put %s: read body: %w", key, err)
		}
	}
}

func (s *Store) uploadPart(ctx context.Context, key, id string, p part) (types.CompletedPart, error) {
	var opts []func(*s3.Options)
	if s.client.Options().RequestChecksumCalculation != aws.RequestChecksumCalculationWhenRequired {
		// The part's CRC32 guards it in flight (see sign.go). A client
		// that sends checksums only where required (for a server that
		// refuses them) sends none, so the SDK signs the part's SHA-256
		// over plain HTTP, as it would any body.
		opts = append(opts, s3.WithAPIOptions(unsignedPayload))
	}
	out, err := s.client.UploadPart(ctx, &s3.UploadPartInput{
		Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.objectKey(key)), UploadId: aws.String(id),
		PartNumber: aws.Int32(p.num), Body: bytes.NewReader(p.data), ContentLength: aws.Int64(int64(len(p.data))),
	}, opts...)
	if err != nil {
		return types.CompletedPart{}, fmt.Errorf("put %s: upload part %d: %w", key, p.num, err)
	}
	return types.CompletedPart{PartNumber: aws.Int32(p.num), ETag: out.ETag}, nil
}

// abortAfter aborts a failed multipart upload, even when ctx is done, and
// returns cause (with the abort's own failure, if any).
func (s *Store) abortAfter(ctx context.Context, key, id string, cause error) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	if err := s.AbortMultipartUpload(actx, key, id); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}
