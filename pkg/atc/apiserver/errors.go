package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"

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

func withStatus(status int, err error) error { return &statusError{status: status, err: err} }

// badRequest marks an error in what the client sent (400).
func badRequest(err error) error { return withStatus(http.StatusBadRequest, err) }

// notFound is a 404 with Concourse's title, e.g. "Job Not Found Error".
func notFound(title, detail string) error {
	return &statusError{status: http.StatusNotFound, title: title, err: errors.New(detail)}
}

// forbidden is a 403; fly prints its body after "forbidden: ".
func forbidden(msg string) error { return withStatus(http.StatusForbidden, errors.New(msg)) }

// unauthenticated is a 401 saying why a token that was sent was refused,
// in the server's own words only (expired, revoked, ...): a library's
// reason would tell a forger what to change next. The whole reason is in
// the server's log (auth.Authenticate).
func unauthenticated(r *http.Request) error {
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
	return withStatus(http.StatusUnauthorized, errors.New(msg))
}

// errorStatus maps an error onto its HTTP status: its own, 400 for what an
// engine marks as the client's fault (a BadRequest() bool method), 404 for
// what the database does not have, 409 for a conflicting change, 413 for
// a body over its limit, else 500.
func errorStatus(err error) int {
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

// fail is the one way a handler answers an error. Server errors are logged
// with the request's ID and answered with that ID only: their text may
// name the database, the blobstore or their addresses.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	status := errorStatus(err)
	if status >= 500 && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		// The client went away: nobody reads the answer.
		s.log.DebugContext(ctx, "request ended by the client", "request_id", requestID(ctx), "err", err)
		return
	}
	msg := err.Error()
	if status >= 500 {
		s.log.ErrorContext(ctx, "request failed", "request_id", requestID(ctx), "method", r.Method, "path", r.URL.Path,
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
		writeJSON(w, status, map[string][]map[string]string{"errors": {{"title": title, "detail": msg, "status": "404"}}})
	default:
		writeJSON(w, status, map[string][]string{"errors": {msg}})
	}
}

// unavailable answers a request the user store could not serve (503).
func (s *Server) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	s.fail(w, r, withStatus(http.StatusServiceUnavailable, err))
}

func writeJSON(w http.ResponseWriter, code int, v any) { httpreply.JSON(w, code, v) }

// requestID is the ID the request's log lines and error answers carry.
func requestID(ctx context.Context) string { return httpreply.RequestID(ctx) }

// decodeBody reads the request's JSON body (at most limit bytes) into v: a
// body that is not v's JSON is 400 naming what, one over the limit 413.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any, what string) error {
	if err := httpreply.Decode(w, r, limit, v, false); err != nil {
		return fmt.Errorf("decode %s: %w", what, err)
	}
	return nil
}

// decodeOptionalBody is decodeBody for a body that may be empty (v is left as it
// is).
func decodeOptionalBody(w http.ResponseWriter, r *http.Request, limit int64, v any, what string) error {
	if err := httpreply.Decode(w, r, limit, v, true); err != nil {
		return fmt.Errorf("decode %s: %w", what, err)
	}
	return nil
}

// recoverPanics is the last line of defence: a handler's panic ends its
// request with a 500, not the server.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { //nolint:errorlint // net/http's own sentinel, compared as it does
				panic(v)
			}
			s.log.ErrorContext(r.Context(), "handler panicked", "request_id", requestID(r.Context()),
				"method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			s.fail(w, r, fmt.Errorf("handler panicked: %v", v))
		}()
		next.ServeHTTP(w, r)
	})
}
