// Package blobstore is Porter's S3-compatible storage: one Store interface
// with drivers on minio-go and aws-sdk-go-v2, the artifact format (a directory
// as a tar stream, through zstd when it compresses) and the object layout.
package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrNotFound is returned (wrapped) when an object does not exist.
var ErrNotFound = errors.New("object not found")

// ErrExists is returned (wrapped) by a Put with IfAbsent when the key
// already holds an object.
var ErrExists = errors.New("object already exists")

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key          string
	Size         int64
	ETag         string
	LastModified time.Time
	ContentType  string
	// Metadata holds user metadata, keys lower-cased without the x-amz-meta- prefix.
	Metadata map[string]string
}

// PutOptions tune one Put.
type PutOptions struct {
	ContentType string
	Metadata    map[string]string
	// PartSize and Concurrency steer the parallel multipart upload used for
	// large or unknown-size bodies; zero picks the driver's defaults.
	PartSize    int64
	Concurrency int
	// IfAbsent makes the store refuse the write (ErrExists) when the key
	// already holds an object (If-None-Match: *), so that two writers of
	// a write-once key cannot both succeed.
	IfAbsent bool
}

// checkRange refuses a range GetRange cannot serve.
func checkRange(key string, offset, length int64) error {
	if offset < 0 || length <= 0 {
		return fmt.Errorf("get %q bytes %d+%d: %w", key, offset, length, errBadRange)
	}
	return nil
}

// errBadRange is a range GetRange does not serve.
var errBadRange = errors.New("the range must start at 0 or later and hold at least one byte")

// checkRangeLength refuses a ranged response shorter than asked for: the
// object ends within the range.
func checkRangeLength(key string, offset, length, got int64) error {
	if got != length {
		return fmt.Errorf("get %q bytes %d+%d: the object ends within the range (%d bytes served)", key, offset, length, got)
	}
	return nil
}

// Store is an S3-compatible bucket.
type Store interface {
	// Put stores the body under key. It is atomic for readers: a failed or
	// interrupted Put never leaves an object (or a shorter one) under key.
	// size is -1 when unknown.
	Put(ctx context.Context, key string, body io.Reader, size int64, opts PutOptions) (ObjectInfo, error)
	// Get opens an object for reading; a missing key gives ErrNotFound.
	Get(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error)
	// GetRange opens length bytes of an object from offset (length > 0),
	// in one request; a missing key gives ErrNotFound, and a range that
	// does not lie wholly within the object is an error.
	GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	// Stat describes an object; a missing key gives ErrNotFound.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Copy copies an object server-side, whatever its size.
	Copy(ctx context.Context, srcKey, dstKey string) (ObjectInfo, error)
	// Delete removes an object; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List returns the objects whose keys start with prefix, in key order.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
}
