package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinioStore is the Store driver on minio-go.
type MinioStore struct {
	Client *minio.Client
	Bucket string
	// PartSize and Concurrency are the defaults of Put's parallel multipart
	// upload (PutOptions override them per call).
	PartSize    int64
	Concurrency int
	// Copy uses a multipart copy for objects larger than
	// MultipartCopyThreshold, in parts of CopyPartSize.
	MultipartCopyThreshold int64
	CopyPartSize           int64

	region    string
	transport *http.Transport
}

var _ Store = (*MinioStore)(nil)

// CloseIdleConnections closes the store's kept-alive connections, and with
// them their goroutines: for an owner done with the store.
func (s *MinioStore) CloseIdleConnections() {
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
}

// NewMinio returns a minio-go driver for cfg (path-style addressing).
func NewMinio(cfg Config) (*MinioStore, error) {
	t, err := cfg.transport()
	if err != nil {
		return nil, fmt.Errorf("minio client: %w", err)
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken),
		Secure:       cfg.Secure,
		Region:       cfg.region(),
		Transport:    t,
		BucketLookup: minio.BucketLookupPath,
		// minio-go backs off 200ms·2^n capped at 1s with full jitter: about
		// 30 attempts span the retry window.
		MaxRetries: int(retryWindow / (500 * time.Millisecond)),
	})
	if err != nil {
		return nil, fmt.Errorf("minio client for %s: %w", cfg.Endpoint, err)
	}
	return &MinioStore{
		Client:                 c,
		Bucket:                 cfg.Bucket,
		PartSize:               DefaultPartSize,
		Concurrency:            DefaultConcurrency,
		MultipartCopyThreshold: DefaultMultipartCopyThreshold,
		CopyPartSize:           DefaultCopyPartSize,
		region:                 cfg.region(),
		transport:              t,
	}, nil
}

// EnsureBucket creates the bucket if it does not exist.
func (s *MinioStore) EnsureBucket(ctx context.Context) error {
	ok, err := s.Client.BucketExists(ctx, s.Bucket)
	if err != nil {
		return fmt.Errorf("check bucket %q: %w", s.Bucket, err)
	}
	if ok {
		return nil
	}
	err = s.Client.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: s.region})
	if err != nil {
		code := minio.ToErrorResponse(err).Code
		if code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
			return nil
		}
		return fmt.Errorf("create bucket %q: %w", s.Bucket, err)
	}
	return nil
}

// Put uploads body. Bodies of unknown size or larger than one part go through
// minio-go's parallel multipart upload, which is only completed (made
// visible) once every part is in, and aborted on error.
func (s *MinioStore) Put(ctx context.Context, key string, body io.Reader, size int64, opts PutOptions) (ObjectInfo, error) {
	mopts := minio.PutObjectOptions{
		ContentType:           opts.ContentType,
		UserMetadata:          opts.Metadata,
		PartSize:              uint64(partSizeOr(opts, s.PartSize)),
		NumThreads:            uint(concurrencyOr(opts, s.Concurrency)),
		ConcurrentStreamParts: true,
		// The parts are hashed by the caller (artifact digests) and by TLS;
		// an extra MD5/CRC pass per part would only cost CPU.
		DisableContentSha256: true,
	}
	if opts.IfAbsent {
		// minio-go sends it with a single PUT and with a multipart
		// upload's completion.
		mopts.SetMatchETagExcept("*")
	}
	// Known-size bodies larger than a part also take the parallel streaming
	// path (minio-go would otherwise upload them one part at a time); the
	// guard still enforces the announced size.
	n := size
	if size > int64(mopts.PartSize) {
		n = -1
	}
	ui, err := s.Client.PutObject(ctx, s.Bucket, key, newGuardReader(body, size), n, mopts)
	if err != nil {
		if opts.IfAbsent && minio.ToErrorResponse(err).StatusCode == http.StatusPreconditionFailed {
			return ObjectInfo{}, fmt.Errorf("put %q: %w: %w", key, ErrExists, err)
		}
		return ObjectInfo{}, fmt.Errorf("put %q: %w", key, mapMinioErr(err))
	}
	return ObjectInfo{
		Key:          key,
		Size:         ui.Size,
		ETag:         strings.Trim(ui.ETag, `"`),
		LastModified: ui.LastModified,
		ContentType:  opts.ContentType,
		Metadata:     lowerKeys(opts.Metadata),
	}, nil
}

// Get opens key for reading.
func (s *MinioStore) Get(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	obj, err := s.Client.GetObject(ctx, s.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("get %q: %w", key, mapMinioErr(err))
	}
	// GetObject is lazy: Stat issues the request and surfaces a missing key.
	oi, err := obj.Stat()
	if err != nil {
		obj.Close()
		return nil, ObjectInfo{}, fmt.Errorf("get %q: %w", key, mapMinioErr(err))
	}
	return obj, fromMinioInfo(oi), nil
}

// GetRange opens length bytes of key from offset, in one request.
func (s *MinioStore) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := checkRange(key, offset, length); err != nil {
		return nil, err
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(offset, offset+length-1); err != nil {
		return nil, fmt.Errorf("get %q bytes %d+%d: %w", key, offset, length, err)
	}
	// Core's GetObject sends the request now (the Client's is lazy) and
	// says how much of the range the object holds.
	body, info, _, err := minio.Core{Client: s.Client}.GetObject(ctx, s.Bucket, key, opts)
	if err != nil {
		return nil, fmt.Errorf("get %q bytes %d+%d: %w", key, offset, length, mapMinioErr(err))
	}
	if err := checkRangeLength(key, offset, length, info.Size); err != nil {
		body.Close()
		return nil, err
	}
	return body, nil
}

// Stat describes key.
func (s *MinioStore) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	oi, err := s.Client.StatObject(ctx, s.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("stat %q: %w", key, mapMinioErr(err))
	}
	return fromMinioInfo(oi), nil
}

// Copy copies srcKey to dstKey server-side; objects above
// MultipartCopyThreshold are copied in CopyPartSize ranges.
func (s *MinioStore) Copy(ctx context.Context, srcKey, dstKey string) (ObjectInfo, error) {
	src, err := s.Stat(ctx, srcKey)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("copy %q to %q: %w", srcKey, dstKey, err)
	}
	dst := minio.CopyDestOptions{Bucket: s.Bucket, Object: dstKey}
	srcOpts := minio.CopySrcOptions{Bucket: s.Bucket, Object: srcKey, MatchETag: src.ETag}
	if src.Size > s.MultipartCopyThreshold {
		// ComposeObject runs UploadPartCopy per range, keeps the source's
		// metadata and aborts the upload on error.
		// minio-go splits the source evenly into ceil(size/PartSize)
		// ranges and refuses ranges under 5 MiB: round the part count down
		// so that every range is at least CopyPartSize.
		ps := max(s.CopyPartSize, minPartSize)
		parts := max(src.Size/ps, 1)
		dst.PartSize = uint64((src.Size + parts - 1) / parts)
		_, err = s.Client.ComposeObject(ctx, dst, srcOpts)
	} else {
		_, err = s.Client.CopyObject(ctx, dst, srcOpts)
	}
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("copy %q to %q: %w", srcKey, dstKey, mapMinioErr(err))
	}
	info, err := s.Stat(ctx, dstKey)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("copy %q to %q: %w", srcKey, dstKey, err)
	}
	return info, nil
}

// Delete removes key; a missing key is not an error.
func (s *MinioStore) Delete(ctx context.Context, key string) error {
	if err := s.Client.RemoveObject(ctx, s.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
		if errors.Is(mapMinioErr(err), ErrNotFound) {
			return nil
		}
		return fmt.Errorf("delete %q: %w", key, mapMinioErr(err))
	}
	return nil
}

// List returns the objects under prefix in key order.
func (s *MinioStore) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	var out []ObjectInfo
	for oi := range s.Client.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if oi.Err != nil {
			return nil, fmt.Errorf("list %q: %w", prefix, mapMinioErr(oi.Err))
		}
		out = append(out, fromMinioInfo(oi))
	}
	return out, nil
}

func fromMinioInfo(oi minio.ObjectInfo) ObjectInfo {
	return ObjectInfo{
		Key:          oi.Key,
		Size:         oi.Size,
		ETag:         strings.Trim(oi.ETag, `"`),
		LastModified: oi.LastModified,
		ContentType:  oi.ContentType,
		Metadata:     lowerKeys(oi.UserMetadata),
	}
}

// mapMinioErr wraps ErrNotFound around missing-object errors, keeping the
// original error in the chain.
func mapMinioErr(err error) error {
	if err == nil {
		return nil
	}
	r := minio.ToErrorResponse(err)
	if r.Code == "NoSuchKey" || (r.StatusCode == http.StatusNotFound && r.Code != "NoSuchBucket" && r.Code != "NoSuchUpload") {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

func lowerKeys(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[strings.ToLower(strings.TrimPrefix(strings.ToLower(k), "x-amz-meta-"))] = v
	}
	return out
}

// guardReader makes every failure of the body visible to the uploader. It
// wraps the body's errors, so a bare io.ErrUnexpectedEOF (which minio-go
// takes for the end of the data) cannot complete a multipart upload, and
// with a known size it fails when the body ends early or runs long.
type guardReader struct {
	r    io.Reader
	want int64 // -1: unknown
	n    int64
}

func newGuardReader(r io.Reader, size int64) *guardReader {
	return &guardReader{r: r, want: size}
}

func (g *guardReader) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	g.n += int64(n)
	if g.want >= 0 && g.n > g.want {
		return n, fmt.Errorf("body is longer than the announced %d bytes", g.want)
	}
	switch {
	case err == nil:
		return n, nil
	case err == io.EOF:
		if g.want >= 0 && g.n < g.want {
			return n, fmt.Errorf("body ended after %d of %d bytes", g.n, g.want)
		}
		return n, io.EOF
	default:
		return n, fmt.Errorf("read body: %w", err)
	}
}

// EnsureLockedBucket implements Locker.
func (s *MinioStore) EnsureLockedBucket(ctx context.Context, days int) error {
	ok, err := s.Client.BucketExists(ctx, s.Bucket)
	if err != nil {
		return fmt.Errorf("check bucket %q: %w", s.Bucket, err)
	}
	if !ok {
		err := s.Client.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: s.region, ObjectLocking: true})
		if err != nil && minio.ToErrorResponse(err).Code != "BucketAlreadyOwnedByYou" {
			return fmt.Errorf("create audit bucket %q: %w", s.Bucket, err)
		}
		mode, unit, validity := minio.Compliance, minio.Days, uint(days)
		if err := s.Client.SetObjectLockConfig(ctx, s.Bucket, &mode, &validity, &unit); err != nil {
			return fmt.Errorf("audit bucket %q: set default retention: %w", s.Bucket, err)
		}
	}
	enabled, mode, validity, unit, err := s.Client.GetObjectLockConfig(ctx, s.Bucket)
	if err != nil && minio.ToErrorResponse(err).Code != "ObjectLockConfigurationNotFoundError" {
		return fmt.Errorf("audit bucket %q: read Object Lock: %w", s.Bucket, err)
	}
	var m string
	var n int
	if mode != nil {
		m = mode.String()
	}
	if validity != nil && unit != nil {
		n = int(*validity)
		if *unit == minio.Years {
			n *= 365
		}
	}
	return checkLock(s.Bucket, m, enabled == "Enabled", n, days)
}

// GetOriginal implements Locker.
func (s *MinioStore) GetOriginal(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	var first *minio.ObjectInfo
	for o := range s.Client.ListObjects(ctx, s.Bucket, minio.ListObjectsOptions{Prefix: key, WithVersions: true}) {
		if o.Err != nil {
			return nil, ObjectInfo{}, fmt.Errorf("list versions of %q: %w", key, mapMinioErr(o.Err))
		}
		if o.Key != key || o.IsDeleteMarker {
			continue
		}
		// S3 lists a key's versions newest first: the last one is the first written.
		first = &o
	}
	if first == nil {
		return nil, ObjectInfo{}, fmt.Errorf("get %q: %w", key, ErrNotFound)
	}
	obj, err := s.Client.GetObject(ctx, s.Bucket, key, minio.GetObjectOptions{VersionID: first.VersionID})
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("get %q version %s: %w", key, first.VersionID, mapMinioErr(err))
	}
	oi, err := obj.Stat()
	if err != nil {
		obj.Close()
		return nil, ObjectInfo{}, fmt.Errorf("get %q version %s: %w", key, first.VersionID, mapMinioErr(err))
	}
	return obj, fromMinioInfo(oi), nil
}
