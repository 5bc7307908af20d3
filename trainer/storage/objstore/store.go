package objstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// Sentinel errors callers test with errors.Is.
var (
	// ErrNotFound is returned when an object (or the bucket) does not exist.
	ErrNotFound = errors.New("object not found")
	// ErrExists is returned by PutIfAbsent when the key already holds an
	// object.
	ErrExists = errors.New("object already exists")
	// ErrConditionalUnsupported is returned by PutIfAbsent when the server
	// says it does not implement conditional writes.
	ErrConditionalUnsupported = errors.New("server does not support conditional writes")
)

// Defaults for Config's zero values.
const (
	DefaultPartSize    = 8 << 20
	DefaultConcurrency = 4
	// MinPartSize is S3's smallest part but the last.
	MinPartSize = 5 << 20
	// MaxPartSize is S3's biggest part.
	MaxPartSize = 5 << 30
	// abortTimeout bounds the clean-up of a failed multipart upload, which
	// runs even when the caller's context is done.
	abortTimeout = 30 * time.Second
)

// Config holds the non-secret options of a store; a train.hcl may set
// them. Credentials never come from here: Open uses the AWS credential
// chain (environment, shared config and profiles, web identity, container
// and instance roles).
type Config struct {
	// Endpoint is the server's base URL (for MinIO, SeaweedFS, Ceph RGW,
	// R2, versitygw). Empty: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the
	// profile's endpoint_url, or AWS S3 itself, in that order.
	Endpoint string
	// Region overrides AWS_REGION and the profile's region.
	Region string
	// PathStyle addresses buckets as endpoint/bucket instead of
	// bucket.endpoint; most self-hosted servers need it.
	PathStyle bool
	// PartSize is the size of each multipart part, from MinPartSize to
	// MaxPartSize; a body no bigger than one part goes up in one
	// PutObject. Memory used by one Put is about (Concurrency+1) *
	// PartSize, more for a body too big for S3's 10,000 parts of PartSize
	// (see Put).
	PartSize int64
	// Concurrency is the number of parts uploaded in parallel, and of
	// ranges a GetRanged reads ahead (as many part buffers).
	Concurrency int
	// ListPageSize is the number of keys asked for per list request; zero
	// lets the server choose (1000 on S3).
	ListPageSize int32
	// Environ, when not nil, is the only environment (KEY=VALUE pairs) the
	// keys, region and endpoint come from: a Nomad task's, for the driver,
	// which runs as root, when it reads a task's storage on its behalf.
	// This process's own environment, its shared AWS files and the
	// machine's role are then not used, and Open fails without
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in it.
	Environ []string
	// RetryFor keeps retrying a request that failed for a reason that may
	// pass (the server unreachable or restarting, a timeout, a 5xx or a
	// throttle) for about this long before it fails, backing off from
	// 200ms to 2s between attempts, so that a worker trains through a
	// short outage of its object store. Zero keeps the SDK's standard
	// retries (three attempts, and a retry quota shared by the client's
	// requests), which suit a command a person waits on. It also bounds
	// how long a body broken part-way is read on (Get), DefaultResumeFor
	// without it.
	RetryFor time.Duration
	// OnRetry, when set with RetryFor, is told of each retry: the attempt
	// that failed (from 1), the error, and the wait before the next.
	OnRetry func(attempt int, err error, wait time.Duration)
	// StallTimeout fails a request whose connection moved no byte either
	// way for about this long (ErrStalled), and the failure is retried
	// like a refused connection. Without it a server that froze, or one
	// lost behind a network that drops its packets rather than refusing
	// them, holds a request for as long as the kernel keeps the
	// connection: many minutes. A multipart upload's completion, which a
	// server may work on without a word, is allowed a second more for
	// each 8 MiB of the upload. Zero means DefaultStallTimeout; negative,
	// no limit. It applies to stores made by Open.
	StallTimeout time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.PartSize == 0 {
		c.PartSize = DefaultPartSize
	}
	if c.PartSize < MinPartSize {
		return c, fmt.Errorf("part size %d is below S3's minimum %d", c.PartSize, MinPartSize)
	}
	if c.PartSize > MaxPartSize {
		return c, fmt.Errorf("part size %d is above S3's maximum %d", c.PartSize, int64(MaxPartSize))
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.ListPageSize < 0 {
		return c, fmt.Errorf("list page size %d is negative", c.ListPageSize)
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	return c, nil
}

// Store reads and writes objects under one bucket and prefix. Keys given
// to and returned by its methods are relative to the prefix. A Store is
// safe for concurrent use.
type Store struct {
	client *s3.Client
	loc    Location
	cfg    Config
	bufMu  sync.Mutex
	bufs   map[int]*sync.Pool // of *[]byte, by length; guarded by bufMu
}

// Open parses an s3:// URL and connects with the AWS SDK's default
// configuration: credentials, region and endpoint the standard way (or
// from cfg.Environ alone), with cfg's non-secret options on top. Options (such as a static credentials
// provider in tests) are applied last.
func Open(ctx context.Context, rawURL string, cfg Config, optFns ...func(*s3.Options)) (*Store, error) {
	loc, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	var awsCfg aws.Config
	if cfg.Environ != nil {
		awsCfg, err = environConfig(cfg.Environ)
	} else {
		awsCfg, err = config.LoadDefaultConfig(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("load aws config for %s: %w", loc, err)
	}
	if cfg, err = cfg.withDefaults(); err != nil {
		return nil, fmt.Errorf("store %s: %w", loc, err)
	}
	fns := []func(*s3.Options){func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, shortErrors, requestClock)
		// A ranged read (resumingBody's) carries no checksum of the whole
		// object; the SDK would log that to stderr for each.
		o.DisableLogOutputChecksumValidationSkipped = true
		if cfg.StallTimeout > 0 {
			o.HTTPClient = stallHTTPClient(awsCfg.HTTPClient, cfg.StallTimeout)
		}
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		if cfg.Region != "" {
			o.Region = cfg.Region
		}
		o.UsePathStyle = o.UsePathStyle || cfg.PathStyle
	}}
	if cfg.RetryFor > 0 {
		fns = append(fns, func(o *s3.Options) { o.Retryer = outageRetryer(cfg.RetryFor, cfg.OnRetry) })
	}
	client := s3.NewFromConfig(awsCfg, append(fns, optFns...)...)
	st, err := buildStore(client, loc, cfg)
	if err == nil && client.Options().Region == "" {
		// The SDK would fail each request with "Invalid region: region was
		// not a valid DNS name"; a self-hosted server needs one to sign for
		// too (us-east-1 where it does not care).
		return nil, fmt.Errorf("%w for %s: set AWS_REGION, a profile's region, or region in the spec's storage block", ErrNoRegion, loc)
	}
	return st, err
}

// ErrNoRegion: no region is configured for a store.
var ErrNoRegion = errors.New("no AWS region")

// ErrNoKeys: Config.Environ holds no access key.
var ErrNoKeys = errors.New("no AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the given environment")

// environConfig is the AWS configuration that the variables in environ
// alone give: static keys, the region, the endpoint.
func environConfig(environ []string) (aws.Config, error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	first := func(keys ...string) string {
		for _, k := range keys {
			if v := env[k]; v != "" {
				return v
			}
		}
		return ""
	}
	id, secret := env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
	if id == "" || secret == "" {
		return aws.Config{}, ErrNoKeys
	}
	c := aws.Config{
		Region:      first("AWS_REGION", "AWS_DEFAULT_REGION"),
		Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(id, secret, env["AWS_SESSION_TOKEN"])),
	}
	if e := first("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"); e != "" {
		c.BaseEndpoint = aws.String(e)
	}
	return c, nil
}

// New returns a store over an existing client (its errors shortened, as
// Open's are).
func New(client *s3.Client, loc Location, cfg Config) (*Store, error) {
	return buildStore(withShortErrors(client), loc, cfg)
}

func buildStore(client *s3.Client, loc Location, cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", loc, err)
	}
	return &Store{client: client, loc: loc, cfg: cfg}, nil
}

// StallTimeout is how long the store's requests may go without a byte
// moving (Config.StallTimeout, its default applied; negative: no limit).
func (s *Store) StallTimeout() time.Duration { return s.cfg.StallTimeout }

// Location returns the bucket and prefix the store works under.
func (s *Store) Location() Location { return s.loc }

// Client returns the underlying S3 client.
func (s *Store) Client() *s3.Client { return s.client }

// objectKey maps a store key, or a prefix of keys, to the bucket's key.
// It joins without cleaning: S3 keys are strings, "a//b" is a key.
func (s *Store) objectKey(key string) string {
	if s.loc.Prefix == "" {
		return key
	}
	return s.loc.Prefix + "/" + key
}

// storeKey maps a bucket key back to a store key.
func (s *Store) storeKey(objKey string) string {
	if s.loc.Prefix == "" {
		return objKey
	}
	return strings.TrimPrefix(objKey, s.loc.Prefix+"/")
}

func checkKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") {
		return fmt.Errorf("key %q: must be non-empty and relative", key)
	}
	return nil
}

// statusCode returns the HTTP status of an SDK error, or 0.
func statusCode(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// errorCode returns the S3 error code of an SDK error, or "".
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// errNoBucket is ErrNotFound for a bucket that does not exist, which
// says so: "object not found" would hide a misspelt bucket.
type errNoBucket struct{}

func (errNoBucket) Error() string        { return "no such bucket" }
func (errNoBucket) Is(target error) bool { return target == ErrNotFound }

// notFound marks an SDK error for a missing object or bucket with
// ErrNotFound, keeping the original in the chain.
func notFound(err error) error {
	switch errorCode(err) {
	case "NoSuchBucket":
		return fmt.Errorf("%w: %w", errNoBucket{}, err)
	case "NoSuchKey", "NotFound", "NoSuchUpload":
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if statusCode(err) == http.StatusNotFound {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// conditional marks the answers to a conditional write: 412 (the key
// exists) and 501 (the server does not implement the condition).
func conditional(err error) error {
	switch {
	case errorCode(err) == "PreconditionFailed", statusCode(err) == http.StatusPreconditionFailed:
		return fmt.Errorf("%w: %w", ErrExists, err)
	case errorCode(err) == "NotImplemented", statusCode(err) == http.StatusNotImplemented:
		return fmt.Errorf("%w: %w", ErrConditionalUnsupported, err)
	}
	return err
}
