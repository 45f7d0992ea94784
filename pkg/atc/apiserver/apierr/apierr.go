// Package apierr is how the API's handlers answer errors, as Concourse's
// API does: an error's own status, 400 for the client's mistakes, 404 for
// what is not there (in Concourse's JSON-API shape, whose detail fly
// prints), 409, 413, and 5xx with the request's ID only.
package apierr

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
	"github.com/porter-ci/porter/pkg/httpreply/bodylimit"
)

// statusError is an error that answers with its own status. title names
// a 404 in Concourse's JSON-API shape, whose detail fly prints.
type statusError struct {
	status int
	title  string
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

func WithStatus(status int, err error) error { return &statusError{status: status, err: err} }

// BadRequest marks an error in what the client sent (400).
func BadRequest(err error) error { return WithStatus(http.StatusBadRequest, err) }

// NotFound is a 404 with Concourse's title, e.g. "Job Not Found Error".
func NotFound(title, detail string) error {
	return &statusError{status: http.StatusNotFound, title: title, err: errors.New(detail)}
}

// Forbidden is a 403; fly prints its body after "forbidden: ".
func Forbidden(msg string) error { return WithStatus(http.StatusForbidden, errors.New(msg)) }

// Unauthenticated is a 401 saying why a token that was sent was refused,
// in the server's own words only (expired, revoked, ...): a library's
// reason would tell a forger what to change next. The whole reason is in
// the server's log (auth.Authenticate).
func Unauthenticated(r *http.Request) error {
	msg := "not authorized: log in first"
	if err := auth.TokenError(r.Context()); err != nil {
		why := "the token is not valid"
		for _, known := range []error{auth.ErrExpired, auth.ErrRevoked, auth.ErrUserRemoved, auth.ErrUnsupportedScheme} {
			if errors.Is(err, known) {
				why = known.Error()
			}
		}
		msg = "not authorized: " + why + "; log in again"
	}
	return WithStatus(http.StatusUnauthorized, errors.New(msg))
}

// Status maps an error onto its HTTP status: its own, 400 for what an
// engine marks as the client's fault (a BadRequest() bool method), 404 for
// what the database does not have, 409 for a conflicting change, 413 for
// a body over its limit, else 500.
func Status(err error) int {
	var se *statusError
	var client interface{ BadRequest() bool }
	switch {
	case bodylimit.TooLarge(err):
		return http.StatusRequestEntityTooLarge
	case errors.As(err, &se):
		return se.status
	case errors.As(err, &client) && client.BadRequest():
		return http.StatusBadRequest
	case errors.Is(err, db.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, db.ErrConflict), errors.Is(err, db.ErrConfigVersion):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// Fail is the one way a handler answers an error. Server errors are logged
// with the request's ID and answered with that ID only: their text may
// name the database, the blobstore or their addresses.
func Fail(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	ctx := r.Context()
	status := Status(err)
	if status >= 500 && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		// The client went away: nobody reads the answer.
		log.DebugContext(ctx, "request ended by the client", "request_id", httpreply.RequestID(ctx), "err", err)
		return
	}
	msg := err.Error()
	if status >= 500 {
		log.ErrorContext(ctx, "request failed", "request_id", httpreply.RequestID(ctx), "method", r.Method, "path", r.URL.Path,
			"status", status, "err", err)
		msg = httpreply.InternalMessage(ctx)
	}
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		httpreply.Text(w, status, msg)
	case http.StatusNotFound:
		title := "Not Found"
		if se := (*statusError)(nil); errors.As(err, &se) && se.title != "" {
			title = se.title
		}
		httpreply.JSON(w, status, map[string][]map[string]string{"errors": {{"title": title, "detail": msg, "status": "404"}}})
	default:
		httpreply.JSON(w, status, map[string][]string{"errors": {msg}})
	}
}
