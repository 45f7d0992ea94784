package blobstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// The audit trail lives in a bucket of its own under Object Lock in
// compliance mode: nobody, not even the bucket's owner, can delete or
// rewrite a version before its retention ends. An overwrite only adds a
// version, so readers take each object's first version (GetOriginal). Only
// the server writes there: steps stage their audit objects, which the
// server seals (pkg/auditseal), so no step's credentials can add a version.

// Locker is implemented by the drivers.
type Locker interface {
	// EnsureLockedBucket creates the bucket with Object Lock and a default
	// compliance-mode retention of days, or checks that the existing one has
	// them.
	EnsureLockedBucket(ctx context.Context, days int) error
	// GetOriginal opens the first version written under key.
	GetOriginal(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error)
}

// ErrNotLocked is returned (wrapped) when a bucket meant for the audit trail
// is not under compliance-mode Object Lock.
var ErrNotLocked = errors.New("bucket is not under compliance-mode Object Lock")

// EnsureLockedBucket creates or checks s's bucket as an audit bucket whose
// objects are retained for retention (rounded up to whole days).
func EnsureLockedBucket(ctx context.Context, s Store, retention time.Duration) error {
	l, ok := s.(Locker)
	if !ok {
		return fmt.Errorf("audit bucket: %T cannot check Object Lock", s)
	}
	days := int((retention + 24*time.Hour - 1) / (24 * time.Hour))
	if days < 1 {
		return fmt.Errorf("audit retention %s: must be at least a day", retention)
	}
	return l.EnsureLockedBucket(ctx, days)
}

// GetOriginal opens the first version of key where s keeps versions (an
// audit bucket), else the object itself.
func GetOriginal(ctx context.Context, s Store, key string) (io.ReadCloser, ObjectInfo, error) {
	if l, ok := s.(Locker); ok {
		return l.GetOriginal(ctx, key)
	}
	return s.Get(ctx, key)
}

func checkLock(bucket, mode string, enabled bool, days, want int) error {
	switch {
	case !enabled:
		return fmt.Errorf("audit bucket %q: %w (Object Lock is off; it can only be turned on when a bucket is created: use a new bucket)", bucket, ErrNotLocked)
	case mode != "COMPLIANCE":
		return fmt.Errorf("audit bucket %q: %w (default retention mode %q)", bucket, ErrNotLocked, mode)
	case days < want:
		return fmt.Errorf("audit bucket %q: default retention of %d days, shorter than the %d asked for", bucket, days, want)
	}
	return nil
}
