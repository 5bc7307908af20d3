package objstore

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// maxCopyObject is the biggest object one CopyObject copies (S3's limit);
// a bigger one is streamed through this process (Copy).
var maxCopyObject int64 = 5 << 30

// Copy copies the object at src to dst within the store's bucket and
// returns what it wrote. Up to 5 GiB the server copies it (CopyObject),
// and the bytes never reach this machine; a bigger object is read and
// written again as it streams, holding no more than a Put does. The
// server works without a word while it copies, so the request is allowed
// a second more of silence per 8 MiB, as a multipart completion is.
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
		return s.copyThrough(ctx, src, dst)
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
