// Package pg holds what every part of Porter's store shares: its errors and
// the small conversions between Go values and PostgreSQL's.
package pg

import (
	"context"
	"encoding/json"
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

// ExecOne runs sql, which must change a row: none changed is ErrNotFound,
// named by what.
func ExecOne(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, what string, sql string, args ...any) error {
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return Classify(err, "%s", what)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return nil
}

// InstanceVarsJSON is the stored form of a pipeline's instance vars ('{}'
// for none).
func InstanceVarsJSON(v map[string]any) (string, error) {
	if len(v) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("instance vars: %w", err)
	}
	return string(b), nil
}
