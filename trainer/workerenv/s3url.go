package workerenv

import (
	"fmt"
	"net/url"
	"strings"
)

// S3Location is where an object store keeps a run's objects: a bucket and
// a key prefix, as a storage path (StoragePath) names them,
// s3://bucket[/prefix]. It is part of the contract so that a spec is
// checked as the workers will read it.
type S3Location struct {
	Bucket string
	// Prefix is "" or a key prefix without leading or trailing slashes.
	Prefix string
}

// String returns the location as an s3:// URL.
func (l S3Location) String() string {
	u := url.URL{Scheme: "s3", Host: l.Bucket}
	if l.Prefix != "" {
		u.Path = "/" + l.Prefix
	}
	return u.String()
}

// ParseS3URL parses s3://bucket[/prefix]. The URL names a place only: user
// information (credentials), queries and fragments are refused, so no
// secret and no option can ride in a storage path. Options come from
// Config; credentials from the AWS credential chain.
func ParseS3URL(raw string) (S3Location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return S3Location{}, fmt.Errorf("parse storage url: %w", err)
	}
	if u.Scheme != "s3" {
		return S3Location{}, fmt.Errorf("storage url %q: scheme is not s3", raw)
	}
	if u.User != nil {
		return S3Location{}, fmt.Errorf("storage url: credentials are not allowed in the url; use the AWS credential chain")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "" {
		return S3Location{}, fmt.Errorf("storage url %q: queries and fragments are not allowed; set options in the storage config", raw)
	}
	if err := checkBucket(u.Host); err != nil {
		return S3Location{}, fmt.Errorf("storage url %q: %w", raw, err)
	}
	prefix := strings.Trim(u.Path, "/")
	for _, seg := range strings.Split(prefix, "/") {
		if prefix != "" && (seg == "" || seg == "." || seg == "..") {
			return S3Location{}, fmt.Errorf("storage url %q: prefix has an empty, . or .. segment", raw)
		}
	}
	return S3Location{Bucket: u.Host, Prefix: prefix}, nil
}

// checkBucket applies S3's bucket naming rules: 3 to 63 characters of
// lower-case letters, digits, dots and hyphens, starting and ending with a
// letter or digit, no two dots in a row, not an IP address.
func checkBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket name %q must be 3 to 63 characters", b)
	}
	digitsAndDots := true
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= 'a' && c <= 'z', c == '-':
			digitsAndDots = false
		case c >= '0' && c <= '9', c == '.':
		default:
			return fmt.Errorf("bucket name %q has %q: only a-z, 0-9, '.' and '-' are allowed", b, c)
		}
	}
	if !isAlnum(b[0]) || !isAlnum(b[len(b)-1]) {
		return fmt.Errorf("bucket name %q must start and end with a letter or digit", b)
	}
	if strings.Contains(b, "..") {
		return fmt.Errorf("bucket name %q has two dots in a row", b)
	}
	if digitsAndDots && strings.Count(b, ".") == 3 {
		return fmt.Errorf("bucket name %q looks like an IP address", b)
	}
	return nil
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
