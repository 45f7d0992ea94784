// Package pg holds what every part of Porter's store shares: its errors and
// the small conversions between Go values and PostgreSQL's.
package pg

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotFound is wrapped by every lookup that finds nothing.
var ErrNotFound = errors.New("not found")

// ErrConflict is wrapped when a row already exists or a change is no longer
// allowed (e.g. finishing a build twice).
var ErrConflict = errors.New("already exists")

// Error codes of PostgreSQL turned into ErrConflict / ErrNotFound.
const (
	CodeUniqueViolation     = "23505"
	CodeForeignKeyViolation = "23503"
)

// Code is the PostgreSQL error code of err, or "".
func Code(err error) string {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		return pe.Code
	}
	return ""
}

// Classify wraps err with what was being done, and with ErrConflict or
// ErrNotFound where PostgreSQL's error means one of those.
func Classify(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	case Code(err) == CodeUniqueViolation:
		return fmt.Errorf("%s: %w: %w", what, ErrConflict, err)
	case Code(err) == CodeForeignKeyViolation:
		// A reference to a team or build that does not exist.
		return fmt.Errorf("%s: %w: %w", what, ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// NullTime is the zero time for NULL, so callers never see a nil pointer.
func NullTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// TimeArg stores the zero time as NULL.
func TimeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// JSONArg passes JSON as text for a $n::jsonb parameter (PostgreSQL
// validates it), and no JSON as NULL.
func JSONArg(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// ZeroNull stores 0 (no team, no build) as NULL.
func ZeroNull[T int | int64](v T) any {
	if v == 0 {
		return nil
	}
	return v
}
