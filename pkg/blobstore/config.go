package blobstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Drivers understood by Open.
const (
	DriverMinio = "minio"
	DriverS3    = "s3"
)

// Defaults shared by both drivers.
const (
	// DefaultPartSize is the multipart part size: large enough for throughput,
	// small enough that PartSize×Concurrency stays a modest amount of memory.
	DefaultPartSize int64 = 16 << 20
	// DefaultConcurrency is how many parts are uploaded at once.
	DefaultConcurrency = 4
	// DefaultMultipartCopyThreshold is S3's largest single CopyObject.
	DefaultMultipartCopyThreshold int64 = 5 << 30
	// DefaultCopyPartSize is the range copied by one UploadPartCopy.
	DefaultCopyPartSize int64 = 512 << 20
	// minPartSize is S3's smallest part (except the last one).
	minPartSize int64 = 5 << 20
	// retryWindow is how long an unreachable endpoint is retried before an
	// operation fails: a restarting MinIO must not fail a step's upload.
	retryWindow = 15 * time.Second
)

// Config says which S3-compatible store to use and how to reach it.
type Config struct {
	Driver    string // "minio" or "s3"
	Endpoint  string // host:port, no scheme
	Bucket    string
	Region    string // defaults to us-east-1
	AccessKey string
	SecretKey string
	// SessionToken comes with temporary (STS) credentials: a step's.
	SessionToken string
	Secure       bool   // https
	CAFile       string // optional PEM bundle trusted in addition to the system roots
}

// Environment variables read by ConfigFromEnv.
const (
	EnvDriver    = "PORTER_BLOBSTORE_DRIVER"
	EnvEndpoint  = "PORTER_BLOBSTORE_ENDPOINT"
	EnvBucket    = "PORTER_BLOBSTORE_BUCKET"
	EnvRegion    = "PORTER_BLOBSTORE_REGION"
	EnvAccessKey = "PORTER_BLOBSTORE_ACCESS_KEY"
	EnvSecretKey = "PORTER_BLOBSTORE_SECRET_KEY"
	// EnvSessionToken is optional: set with temporary credentials.
	EnvSessionToken = "PORTER_BLOBSTORE_SESSION_TOKEN"
	EnvSecure       = "PORTER_BLOBSTORE_SECURE"
	EnvCAFile       = "PORTER_BLOBSTORE_CA_FILE"
)

// ConfigFromEnv reads a Config from the PORTER_BLOBSTORE_* variables. DRIVER
// defaults to "minio", REGION to "us-east-1", SECURE to false; ENDPOINT,
// BUCKET, ACCESS_KEY and SECRET_KEY are required.
func ConfigFromEnv() (Config, error) { return ConfigFrom(os.Getenv) }

// ConfigFrom is ConfigFromEnv with the variables read through getenv (an
// environment that is not the process's, e.g. a simulated pod's).
func ConfigFrom(getenv func(string) string) (Config, error) {
	cfg := Config{
		Driver:       getenv(EnvDriver),
		Endpoint:     getenv(EnvEndpoint),
		Bucket:       getenv(EnvBucket),
		Region:       getenv(EnvRegion),
		AccessKey:    getenv(EnvAccessKey),
		SecretKey:    getenv(EnvSecretKey),
		SessionToken: getenv(EnvSessionToken),
		CAFile:       getenv(EnvCAFile),
	}
	if cfg.Driver == "" {
		cfg.Driver = DriverMinio
	}
	var errs []error
	for _, req := range []struct{ name, val string }{
		{EnvEndpoint, cfg.Endpoint},
		{EnvBucket, cfg.Bucket},
		{EnvAccessKey, cfg.AccessKey},
		{EnvSecretKey, cfg.SecretKey},
	} {
		if req.val == "" {
			errs = append(errs, fmt.Errorf("blobstore config: %s is not set", req.name))
		}
	}
	if s := getenv(EnvSecure); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("blobstore config: %s=%q is not a boolean", EnvSecure, s))
		}
		cfg.Secure = b
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return cfg, cfg.Validate()
}

// Validate checks that the Config names a driver, an endpoint and a bucket.
func (c Config) Validate() error {
	switch c.Driver {
	case DriverMinio, DriverS3:
	default:
		return fmt.Errorf("blobstore config: unknown driver %q (want %q or %q)", c.Driver, DriverMinio, DriverS3)
	}
	if c.Endpoint == "" {
		return errors.New("blobstore config: endpoint is empty")
	}
	if strings.Contains(c.Endpoint, "/") {
		return fmt.Errorf("blobstore config: endpoint %q must be host:port, without scheme or path (use Secure for https)", c.Endpoint)
	}
	if _, _, err := net.SplitHostPort(c.Endpoint); err != nil {
		return fmt.Errorf("blobstore config: endpoint %q is not host:port: %w", c.Endpoint, err)
	}
	if c.Bucket == "" {
		return errors.New("blobstore config: bucket is empty")
	}
	return nil
}

func (c Config) region() string {
	if c.Region == "" {
		return "us-east-1"
	}
	return c.Region
}

// Open returns the Store the Config describes. It does not create the bucket
// (see EnsureBucket).
func Open(ctx context.Context, cfg Config) (Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch cfg.Driver {
	case DriverS3:
		return NewS3(ctx, cfg)
	default:
		return NewMinio(cfg)
	}
}

// BucketEnsurer is implemented by the drivers.
type BucketEnsurer interface {
	EnsureBucket(ctx context.Context) error
}

// EnsureBucket creates the store's bucket if it does not exist yet.
func EnsureBucket(ctx context.Context, s Store) error {
	be, ok := s.(BucketEnsurer)
	if !ok {
		return fmt.Errorf("ensure bucket: %T cannot create buckets", s)
	}
	return be.EnsureBucket(ctx)
}

// URL is the endpoint as a URL (STS requests go to it).
func (c Config) URL() string {
	if c.Secure {
		return "https://" + c.Endpoint
	}
	return "http://" + c.Endpoint
}

// HTTPClient is a client that trusts what the drivers trust (CAFile).
func (c Config) HTTPClient() (*http.Client, error) {
	t, err := c.transport()
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: t, Timeout: time.Minute}, nil
}

// transport is the HTTP transport of both drivers: the CA file (if any) is
// trusted on top of the system roots, and idle connections are kept for the
// parallel part uploads.
func (c Config) transport() (*http.Transport, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	t.ResponseHeaderTimeout = 2 * time.Minute
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", c.CAFile)
		}
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return t, nil
}

func partSizeOr(opts PutOptions, def int64) int64 {
	if opts.PartSize > 0 {
		return max(opts.PartSize, minPartSize)
	}
	return def
}

func concurrencyOr(opts PutOptions, def int) int {
	if opts.Concurrency > 0 {
		return opts.Concurrency
	}
	return def
}
