package objstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// ListDirs returns the names one level below prefix ("" or ending in
// "/"), as a directory listing would: the next path segment of every key
// under it, once each, sorted, without its slash. Objects directly under
// prefix are not among them. It asks the server to group the keys
// (ListObjectsV2 with the delimiter "/"), so it costs one request per
// page of names, not one per object.
func (s *Store) ListDirs(ctx context.Context, prefix string) ([]string, error) {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		return nil, fmt.Errorf("list dirs: prefix %q does not end in a slash", prefix)
	}
	in := &s3.ListObjectsV2Input{
		Bucket:    aws.String(s.loc.Bucket),
		Prefix:    aws.String(s.objectKey(prefix)),
		Delimiter: aws.String("/"),
	}
	if s.cfg.ListPageSize > 0 {
		in.MaxKeys = aws.Int32(s.cfg.ListPageSize)
	}
	var names []string
	for {
		out, err := s.client.ListObjectsV2(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", Location{Bucket: s.loc.Bucket, Prefix: s.objectKey(prefix)}, notFound(err))
		}
		for _, p := range out.CommonPrefixes {
			name := strings.TrimSuffix(strings.TrimPrefix(s.storeKey(aws.ToString(p.Prefix)), prefix), "/")
			if name != "" {
				names = append(names, name)
			}
		}
		if !aws.ToBool(out.IsTruncated) || aws.ToString(out.NextContinuationToken) == "" {
			break
		}
		in.ContinuationToken = out.NextContinuationToken
	}
	slices.Sort(names)
	return slices.Compact(names), nil // a name may come back on two pages
}

// Any reports whether at least one object's key starts with prefix, in
// one request for one key.
func (s *Store) Any(ctx context.Context, prefix string) (bool, error) {
	out, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.loc.Bucket), Prefix: aws.String(s.objectKey(prefix)), MaxKeys: aws.Int32(1),
	})
	if err != nil {
		return false, fmt.Errorf("list %s: %w", prefix, notFound(err))
	}
	return len(out.Contents) > 0, nil
}
