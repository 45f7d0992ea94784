package blobstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"golang.org/x/sync/errgroup"
)

// S3Store is the Store driver on aws-sdk-go-v2.
type S3Store struct {
	Client *s3.Client
	Bucket string
	// PartSize and Concurrency are the defaults of Put's parallel multipart
	// upload (PutOptions override them per call).
	PartSize    int64
	Concurrency int
	// Copy uses UploadPartCopy for objects larger than
	// MultipartCopyThreshold, in parts of CopyPartSize.
	MultipartCopyThreshold int64
	CopyPartSize           int64

	region string
}

var _ Store = (*S3Store)(nil)

// NewS3 returns an aws-sdk-go-v2 driver for cfg: path-style addressing at
// the configured endpoint. It deliberately ignores the AWS_* environment and
// shared config files so that only cfg decides where objects go.
func NewS3(ctx context.Context, cfg Config) (*S3Store, error) {
	t, err := cfg.transport()
	if err != nil {
		return nil, fmt.Errorf("s3 client: %w", err)
	}
	scheme := "http"
	if cfg.Secure {
		scheme = "https"
	}
	awsCfg := aws.Config{
		Region:      cfg.region(),
		Credentials: credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken),
		HTTPClient:  &http.Client{Transport: t},
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				// Backoff is random up to 2^n seconds, capped at 2s: 16
				// attempts span the retry window. No client-side retry quota:
				// a short outage must not exhaust it for every parallel part.
				o.MaxAttempts = int(retryWindow/time.Second) + 1
				o.MaxBackoff = 2 * time.Second
				o.RateLimiter = ratelimit.None
			})
		},
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(scheme + "://" + cfg.Endpoint)
		o.UsePathStyle = true
		// Checksums only where S3 requires them: S3-compatible servers
		// differ in their support for the newer flexible checksums.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return &S3Store{
		Client:                 client,
		Bucket:                 cfg.Bucket,
		PartSize:               DefaultPartSize,
		Concurrency:            DefaultConcurrency,
		MultipartCopyThreshold: DefaultMultipartCopyThreshold,
		CopyPartSize:           DefaultCopyPartSize,
		region:                 cfg.region(),
	}, nil
}

// EnsureBucket creates the bucket if it does not exist.
func (s *S3Store) EnsureBucket(ctx context.Context) error {
	_, err := s.Client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.Bucket})
	if err == nil {
		return nil
	}
	in := &s3.CreateBucketInput{Bucket: &s.Bucket}
	if s.region != "us-east-1" {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{LocationConstraint: types.BucketLocationConstraint(s.region)}
	}
	if _, err := s.Client.CreateBucket(ctx, in); err != nil {
		var owned *types.BucketAlreadyOwnedByYou
		if errors.As(err, &owned) {
			return nil
		}
		return fmt.Errorf("create bucket %q: %w", s.Bucket, err)
	}
	return nil
}

// Put uploads body. A body that fits in one part is sent with PutObject;
// anything larger (or of unknown size) becomes a multipart upload whose parts
// are sent Concurrency at a time and which is aborted on any error, so
// nothing appears under key unless the whole body made it.
func (s *S3Store) Put(ctx context.Context, key string, body io.Reader, size int64, opts PutOptions) (ObjectInfo, error) {
	partSize := partSizeOr(opts, s.PartSize)
	if size > partSize*10000 {
		partSize = (size + 9999) / 10000
	}
	body = newGuardReader(body, size)
	if size >= 0 && size <= partSize {
		data := make([]byte, size)
		if _, err := io.ReadFull(body, data); err != nil {
			return ObjectInfo{}, fmt.Errorf("put %q: %w", key, err)
		}
		// The guard fails a body longer than announced.
		if _, err := body.Read(make([]byte, 1)); err != io.EOF {
			return ObjectInfo{}, fmt.Errorf("put %q: body is longer than the announced %d bytes", key, size)
		}
		return s.putSingle(ctx, key, data, opts)
	}
	// Unknown size: the first part decides; a body that ends within it is
	// a single PUT.
	first := make([]byte, partSize)
	n, err := io.ReadFull(body, first)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return s.putSingle(ctx, key, first[:n], opts)
	case err != nil:
		return ObjectInfo{}, fmt.Errorf("put %q: %w", key, err)
	}
	info, err := s.putMultipart(ctx, key, first, body, partSize, concurrencyOr(opts, s.Concurrency), opts)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("put %q: %w", key, err)
	}
	return info, nil
}

func (s *S3Store) putSingle(ctx context.Context, key string, data []byte, opts PutOptions) (ObjectInfo, error) {
	out, err := s.Client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        &s.Bucket,
		Key:           &key,
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		ContentType:   optString(opts.ContentType),
		Metadata:      opts.Metadata,
		IfNoneMatch:   ifAbsent(opts),
	})
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("put %q: %w", key, mapPutErr(err))
	}
	return ObjectInfo{
		Key:          key,
		Size:         int64(len(data)),
		ETag:         strings.Trim(aws.ToString(out.ETag), `"`),
		LastModified: time.Now(),
		ContentType:  opts.ContentType,
		Metadata:     lowerKeys(opts.Metadata),
	}, nil
}

// putMultipart uploads first and the rest of body as parts. At most
// concurrency part buffers exist at once: the reader waits for a free one.
func (s *S3Store) putMultipart(ctx context.Context, key string, first []byte, body io.Reader, partSize int64, concurrency int, opts PutOptions) (_ ObjectInfo, err error) {
	created, err := s.Client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket:      &s.Bucket,
		Key:         &key,
		ContentType: optString(opts.ContentType),
		Metadata:    opts.Metadata,
	})
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("create multipart upload: %w", mapS3Err(err))
	}
	uploadID := created.UploadId
	defer func() {
		if err != nil {
			s.abort(ctx, key, uploadID)
		}
	}()

	bufs := make(chan []byte, concurrency)
	bufs <- first
	for range concurrency - 1 {
		bufs <- nil // allocated on first use, so small bodies stay small
	}
	var (
		mu    sync.Mutex
		parts []types.CompletedPart
		total int64
	)
	g, gctx := errgroup.WithContext(ctx)
	readErr := func() error {
		for num := int32(1); ; num++ {
			var buf []byte
			select {
			case buf = <-bufs:
			case <-gctx.Done():
				return nil // a part failed: its error is the one to report
			}
			var n int
			if num == 1 {
				n = len(buf)
			} else {
				if buf == nil {
					buf = make([]byte, partSize)
				}
				var rerr error
				n, rerr = io.ReadFull(body, buf)
				if rerr == io.EOF {
					return nil
				}
				if rerr != nil && rerr != io.ErrUnexpectedEOF {
					return rerr
				}
			}
			if num > 10000 {
				return errors.New("body needs more than 10000 parts")
			}
			total += int64(n)
			g.Go(func() error {
				defer func() { bufs <- buf }()
				out, err := s.Client.UploadPart(gctx, &s3.UploadPartInput{
					Bucket:        &s.Bucket,
					Key:           &key,
					UploadId:      uploadID,
					PartNumber:    aws.Int32(num),
					Body:          bytes.NewReader(buf[:n]),
					ContentLength: aws.Int64(int64(n)),
				})
				if err != nil {
					return fmt.Errorf("upload part %d: %w", num, mapS3Err(err))
				}
				mu.Lock()
				parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
				mu.Unlock()
				return nil
			})
			if n < len(buf) {
				return nil
			}
		}
	}()
	if err := g.Wait(); err != nil {
		return ObjectInfo{}, err
	}
	if readErr != nil {
		return ObjectInfo{}, readErr
	}
	if err := ctx.Err(); err != nil {
		return ObjectInfo{}, err
	}
	slices.SortFunc(parts, func(a, b types.CompletedPart) int { return int(*a.PartNumber - *b.PartNumber) })
	out, err := s.Client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket:          &s.Bucket,
		Key:             &key,
		UploadId:        uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
		IfNoneMatch:     ifAbsent(opts),
	})
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("complete multipart upload: %w", mapPutErr(err))
	}
	return ObjectInfo{
		Key:          key,
		Size:         total,
		ETag:         strings.Trim(aws.ToString(out.ETag), `"`),
		LastModified: time.Now(),
		ContentType:  opts.ContentType,
		Metadata:     lowerKeys(opts.Metadata),
	}, nil
}

// abort discards a multipart upload's parts. It runs even when ctx was
// canceled (that is often why it runs).
func (s *S3Store) abort(ctx context.Context, key string, uploadID *string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_, _ = s.Client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &s.Bucket, Key: &key, UploadId: uploadID})
}

// Get opens key for reading.
func (s *S3Store) Get(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	return s.getVersion(ctx, key, nil)
}

// GetRange opens length bytes of key from offset, in one request.
func (s *S3Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := checkRange(key, offset, length); err != nil {
		return nil, err
	}
	rng := fmt.Sprintf("bytes=%d-%d", offset, offset+length-1)
	out, err := s.Client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.Bucket, Key: &key, Range: &rng})
	if err != nil {
		return nil, fmt.Errorf("get %q bytes %d+%d: %w", key, offset, length, mapS3Err(err))
	}
	if err := checkRangeLength(key, offset, length, aws.ToInt64(out.ContentLength)); err != nil {
		out.Body.Close()
		return nil, err
	}
	return out.Body, nil
}

func (s *S3Store) getVersion(ctx context.Context, key string, version *string) (io.ReadCloser, ObjectInfo, error) {
	out, err := s.Client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.Bucket, Key: &key, VersionId: version})
	if err != nil {
		return nil, ObjectInfo{}, fmt.Errorf("get %q: %w", key, mapS3Err(err))
	}
	return out.Body, ObjectInfo{
		Key:          key,
		Size:         aws.ToInt64(out.ContentLength),
		ETag:         strings.Trim(aws.ToString(out.ETag), `"`),
		LastModified: aws.ToTime(out.LastModified),
		ContentType:  aws.ToString(out.ContentType),
		Metadata:     lowerKeys(out.Metadata),
	}, nil
}

// Stat describes key.
func (s *S3Store) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	out, err := s.Client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.Bucket, Key: &key})
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("stat %q: %w", key, mapS3Err(err))
	}
	return ObjectInfo{
		Key:          key,
		Size:         aws.ToInt64(out.ContentLength),
		ETag:         strings.Trim(aws.ToString(out.ETag), `"`),
		LastModified: aws.ToTime(out.LastModified),
		ContentType:  aws.ToString(out.ContentType),
		Metadata:     lowerKeys(out.Metadata),
	}, nil
}

// Copy copies srcKey to dstKey server-side: CopyObject up to
// MultipartCopyThreshold, UploadPartCopy ranges above it.
func (s *S3Store) Copy(ctx context.Context, srcKey, dstKey string) (ObjectInfo, error) {
	src, err := s.Stat(ctx, srcKey)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("copy %q to %q: %w", srcKey, dstKey, err)
	}
	source := s.Bucket + "/" + srcKey
	if src.Size > s.MultipartCopyThreshold {
		err = s.copyMultipart(ctx, src, source, dstKey)
	} else {
		_, err = s.Client.CopyObject(ctx, &s3.CopyObjectInput{
			Bucket:            &s.Bucket,
			Key:               &dstKey,
			CopySource:        &source,
			CopySourceIfMatch: aws.String(`"` + src.ETag + `"`),
		})
		err = mapS3Err(err)
	}
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("copy %q to %q: %w", srcKey, dstKey, err)
	}
	info, err := s.Stat(ctx, dstKey)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("copy %q to %q: %w", srcKey, dstKey, err)
	}
	return info, nil
}

func (s *S3Store) copyMultipart(ctx context.Context, src ObjectInfo, source, dstKey string) (err error) {
	partSize := max(s.CopyPartSize, minPartSize)
	if src.Size > partSize*10000 {
		partSize = (src.Size + 9999) / 10000
	}
	created, err := s.Client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket:      &s.Bucket,
		Key:         &dstKey,
		ContentType: optString(src.ContentType),
		Metadata:    src.Metadata,
	})
	if err != nil {
		return fmt.Errorf("create multipart upload: %w", mapS3Err(err))
	}
	defer func() {
		if err != nil {
			s.abort(ctx, dstKey, created.UploadId)
		}
	}()
	nparts := int((src.Size + partSize - 1) / partSize)
	parts := make([]types.CompletedPart, nparts)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(s.Concurrency, 1))
	for i := range nparts {
		g.Go(func() error {
			start := int64(i) * partSize
			end := min(start+partSize, src.Size) - 1
			out, err := s.Client.UploadPartCopy(gctx, &s3.UploadPartCopyInput{
				Bucket:            &s.Bucket,
				Key:               &dstKey,
				UploadId:          created.UploadId,
				PartNumber:        aws.Int32(int32(i + 1)),
				CopySource:        &source,
				CopySourceRange:   aws.String(fmt.Sprintf("bytes=%d-%d", start, end)),
				CopySourceIfMatch: aws.String(`"` + src.ETag + `"`),
			})
			if err != nil {
				return fmt.Errorf("copy part %d: %w", i+1, mapS3Err(err))
			}
			parts[i] = types.CompletedPart{ETag: out.CopyPartResult.ETag, PartNumber: aws.Int32(int32(i + 1))}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	_, err = s.Client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket:          &s.Bucket,
		Key:             &dstKey,
		UploadId:        created.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil {
		return fmt.Errorf("complete multipart upload: %w", mapS3Err(err))
	}
	return nil
}

// Delete removes key; a missing key is not an error.
func (s *S3Store) Delete(ctx context.Context, key string) error {
	_, err := s.Client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.Bucket, Key: &key})
	if err != nil && !errors.Is(mapS3Err(err), ErrNotFound) {
		return fmt.Errorf("delete %q: %w", key, mapS3Err(err))
	}
	return nil
}

// List returns the objects under prefix in key order.
func (s *S3Store) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	var out []ObjectInfo
	p := s3.NewListObjectsV2Paginator(s.Client, &s3.ListObjectsV2Input{Bucket: &s.Bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %q: %w", prefix, mapS3Err(err))
		}
		for _, o := range page.Contents {
			out = append(out, ObjectInfo{
				Key:          aws.ToString(o.Key),
				Size:         aws.ToInt64(o.Size),
				ETag:         strings.Trim(aws.ToString(o.ETag), `"`),
				LastModified: aws.ToTime(o.LastModified),
			})
		}
	}
	return out, nil
}

// mapS3Err wraps ErrNotFound around missing-object errors (HeadObject only
// has the status code to say so), keeping the original error in the chain.
func mapS3Err(err error) error {
	if err == nil {
		return nil
	}
	var (
		noKey    *types.NoSuchKey
		notFound *types.NotFound
		api      smithy.APIError
		resp     *smithyhttp.ResponseError
	)
	switch {
	case errors.As(err, &noKey), errors.As(err, &notFound):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.As(err, &api) && (api.ErrorCode() == "NoSuchBucket" || api.ErrorCode() == "NoSuchUpload"):
		return err
	case errors.As(err, &api) && api.ErrorCode() == "NoSuchKey":
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.As(err, &resp) && resp.HTTPStatusCode() == http.StatusNotFound:
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// ifAbsent is the If-None-Match of a Put: "*" with IfAbsent.
func ifAbsent(opts PutOptions) *string {
	if opts.IfAbsent {
		return aws.String("*")
	}
	return nil
}

// mapPutErr is mapS3Err for writes: a failed If-None-Match (412) is
// ErrExists.
func mapPutErr(err error) error {
	var resp *smithyhttp.ResponseError
	if errors.As(err, &resp) && resp.HTTPStatusCode() == http.StatusPreconditionFailed {
		return fmt.Errorf("%w: %w", ErrExists, err)
	}
	return mapS3Err(err)
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// EnsureLockedBucket implements Locker.
func (s *S3Store) EnsureLockedBucket(ctx context.Context, days int) error {
	if _, err := s.Client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.Bucket}); err != nil {
		in := &s3.CreateBucketInput{Bucket: &s.Bucket, ObjectLockEnabledForBucket: aws.Bool(true)}
		if s.region != "us-east-1" {
			in.CreateBucketConfiguration = &types.CreateBucketConfiguration{LocationConstraint: types.BucketLocationConstraint(s.region)}
		}
		var owned *types.BucketAlreadyOwnedByYou
		if _, err := s.Client.CreateBucket(ctx, in); err != nil && !errors.As(err, &owned) {
			return fmt.Errorf("create audit bucket %q: %w", s.Bucket, err)
		}
		_, err := s.Client.PutObjectLockConfiguration(ctx, &s3.PutObjectLockConfigurationInput{Bucket: &s.Bucket,
			ObjectLockConfiguration: &types.ObjectLockConfiguration{ObjectLockEnabled: types.ObjectLockEnabledEnabled,
				Rule: &types.ObjectLockRule{DefaultRetention: &types.DefaultRetention{Mode: types.ObjectLockRetentionModeCompliance, Days: aws.Int32(int32(days))}}}})
		if err != nil {
			return fmt.Errorf("audit bucket %q: set default retention: %w", s.Bucket, err)
		}
	}
	out, err := s.Client.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: &s.Bucket})
	if err != nil {
		return fmt.Errorf("audit bucket %q: read Object Lock: %w (%w)", s.Bucket, err, ErrNotLocked)
	}
	var mode string
	var n int
	c := out.ObjectLockConfiguration
	if c != nil && c.Rule != nil && c.Rule.DefaultRetention != nil {
		mode = string(c.Rule.DefaultRetention.Mode)
		n = int(aws.ToInt32(c.Rule.DefaultRetention.Days)) + 365*int(aws.ToInt32(c.Rule.DefaultRetention.Years))
	}
	return checkLock(s.Bucket, mode, c != nil && c.ObjectLockEnabled == types.ObjectLockEnabledEnabled, n, days)
}

// GetOriginal implements Locker.
func (s *S3Store) GetOriginal(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error) {
	var first *string
	p := s3.NewListObjectVersionsPaginator(s.Client, &s3.ListObjectVersionsInput{Bucket: &s.Bucket, Prefix: &key})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, ObjectInfo{}, fmt.Errorf("list versions of %q: %w", key, mapS3Err(err))
		}
		for _, v := range page.Versions {
			// Newest first: the last one is the first written.
			if aws.ToString(v.Key) == key {
				first = v.VersionId
			}
		}
	}
	if first == nil {
		return nil, ObjectInfo{}, fmt.Errorf("get %q: %w", key, ErrNotFound)
	}
	return s.getVersion(ctx, key, first)
}
