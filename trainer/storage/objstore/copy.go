package objstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// maxCopyObject is the biggest object one CopyObject copies (S3's limit);
// a bigger one is copied in parts (Copy).
var maxCopyObject int64 = 5 << 30

// copyPartSize is the size of the parts a copy in parts asks for (or
// more, where 10,000 of them would not hold the object): the server
// copies each, so big parts only save requests.
var copyPartSize int64 = 512 << 20

// Copy copies the object at src to dst within the store's bucket and
// returns what it wrote. The server copies it, and the bytes never reach
// this machine: up to 5 GiB in one CopyObject, a bigger object as a
// multipart upload of parts copied from ranges of it (UploadPartCopy),
// Concurrency at a time. Each copy is of the object first described (If-
// Match its ETag). A server without UploadPartCopy has a big object read
// and written again as it streams. The server works without a word while
// it copies, so each request is allowed a second more of silence per 8
// MiB it copies, as a multipart completion is.
func (s *Store) Copy(ctx context.Context, src, dst string) (ObjectInfo, error) {
	for _, k := range []string{src, dst} {
		if err := checkKey(k); err != nil {
			return ObjectInfo{}, fmt.Errorf("copy: %w", err)
		}
	}
	info, err := s.Head(ctx, src)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("copy %s: %w", src, err)
	}
	if info.Size > maxCopyObject {
		res, err := s.copyInParts(ctx, src, dst, info)
		if errors.Is(err, errNoPartCopy) {
			return s.copyThrough(ctx, src, dst)
		}
		return res, err
	}
	out, err := s.client.CopyObject(s.workingOn(ctx, info.Size), &s3.CopyObjectInput{
		Bucket:     aws.String(s.loc.Bucket),
		Key:        aws.String(s.objectKey(dst)),
		CopySource: aws.String(copySource(s.loc.Bucket, s.objectKey(src))),
		// The object read is the one just described, not one that
		// replaced it since.
		CopySourceIfMatch: aws.String(info.ETag),
	})
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("copy %s to %s: %w", src, dst, changed(notFound(err)))
	}
	res := ObjectInfo{Key: dst, Size: info.Size}
	if out.CopyObjectResult != nil {
		res.ETag = aws.ToString(out.CopyObjectResult.ETag)
		res.LastModified = aws.ToTime(out.CopyObjectResult.LastModified)
	}
	return res, nil
}

// errNoPartCopy is a server's refusal of UploadPartCopy.
var errNoPartCopy = errors.New("server does not copy parts")

// copyInParts has the server copy src (described by info) to dst as a
// multipart upload whose parts are copied from ranges of src.
func (s *Store) copyInParts(ctx context.Context, src, dst string, info ObjectInfo) (ObjectInfo, error) {
	part := max(copyPartSize, (info.Size+int64(maxParts)-1)/int64(maxParts))
	n := int32((info.Size + part - 1) / part)
	created, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.objectKey(dst)),
	})
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("copy %s to %s: start multipart upload: %w", src, dst, err)
	}
	id := aws.ToString(created.UploadId)
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu    sync.Mutex
		parts []types.CompletedPart
		wg    sync.WaitGroup
	)
	nums := make(chan int32)
	for range min(s.cfg.Concurrency, int(n)) {
		wg.Go(func() {
			for num := range nums {
				if pctx.Err() != nil {
					continue
				}
				off := int64(num-1) * part
				out, err := s.client.UploadPartCopy(s.workingOn(pctx, min(part, info.Size-off)), &s3.UploadPartCopyInput{
					Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.objectKey(dst)), UploadId: aws.String(id),
					PartNumber:        aws.Int32(num),
					CopySource:        aws.String(copySource(s.loc.Bucket, s.objectKey(src))),
					CopySourceRange:   aws.String(fmt.Sprintf("bytes=%d-%d", off, min(off+part, info.Size)-1)),
					CopySourceIfMatch: aws.String(info.ETag),
				})
				if err != nil {
					if errorCode(err) == "NotImplemented" || statusCode(err) == http.StatusNotImplemented {
						err = fmt.Errorf("%w: %w", errNoPartCopy, err)
					}
					cancel(fmt.Errorf("copy %s to %s: part %d: %w", src, dst, num, changed(notFound(err))))
					continue
				}
				var etag *string
				if out.CopyPartResult != nil {
					etag = out.CopyPartResult.ETag
				}
				mu.Lock()
				parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(num), ETag: etag})
				mu.Unlock()
			}
		})
	}
	for num := int32(1); num <= n && pctx.Err() == nil; num++ {
		nums <- num
	}
	close(nums)
	wg.Wait()
	if err := context.Cause(pctx); err != nil {
		return ObjectInfo{}, s.abortAfter(ctx, dst, id, err)
	}
	slices.SortFunc(parts, func(a, b types.CompletedPart) int { return int(*a.PartNumber - *b.PartNumber) })
	etag, err := s.complete(ctx, dst, id, parts, info.Size, false)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return ObjectInfo{Key: dst, Size: info.Size, ETag: etag}, nil
}

// copyThrough copies src to dst by reading it (in ranges) and writing it
// again (in parts sized by its length).
func (s *Store) copyThrough(ctx context.Context, src, dst string) (ObjectInfo, error) {
	body, info, err := s.GetRanged(ctx, src)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("copy %s: %w", src, err)
	}
	defer body.Close()
	res, err := s.Put(ctx, dst, body)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if res.Size != info.Size {
		return ObjectInfo{}, fmt.Errorf("copy %s to %s: wrote %d bytes of %d", src, dst, res.Size, info.Size)
	}
	return ObjectInfo{Key: dst, Size: res.Size, ETag: res.ETag}, nil
}

// copySource is CopyObject's source: the bucket and key, each segment of
// the key escaped as a URL path's.
func copySource(bucket, key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return bucket + "/" + strings.Join(segs, "/")
}
