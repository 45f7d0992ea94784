// Package httpreply is the one way the server's HTTP handlers (the API's
// and the login's) answer: JSON bodies, plain-text refusals, request IDs,
// and server errors that are logged in full and answered with the
// request's ID only, since their text may name the database, the
// blobstore or their addresses.
package httpreply

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/porter-ci/porter/pkg/httpreply/bodylimit"
)

// JSON answers status with v as its JSON body.
func JSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only a value of the server's own making gets here: a bug.
		Text(w, http.StatusInternalServerError, "internal server error: the answer could not be encoded")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// Text answers status with msg as a plain-text body (what fly prints of a
// 400, 401 or 403).
func Text(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg+"\n")
}

// InternalMessage is what a client is told of a server error: the request's
// ID, which the server's log has with the error.
func InternalMessage(ctx context.Context) string {
	return "internal server error (request " + RequestID(ctx) + "): the server's log has the details"
}

// Internal logs err with the request, and answers status (a 5xx) with the
// request's ID only.
func Internal(w http.ResponseWriter, r *http.Request, log *slog.Logger, status int, what string, err error) {
	log.ErrorContext(r.Context(), what, "request_id", RequestID(r.Context()), "method", r.Method, "path", r.URL.Path,
		"status", status, "err", err)
	Text(w, status, InternalMessage(r.Context()))
}

// BodyError is a request body that is not what the route takes: the
// client's fault (BadRequest), answered with 400.
type BodyError struct{ Err error }

func (e BodyError) Error() string    { return e.Err.Error() }
func (e BodyError) Unwrap() error    { return e.Err }
func (e BodyError) BadRequest() bool { return true }

// Decode reads the request's JSON body into v, reading at most limit
// bytes: a body over it is bodylimit's error (413, naming the limit), a
// body that is not v's JSON a BodyError (400). An empty body leaves v as
// it is when allowEmpty.
func Decode(w http.ResponseWriter, r *http.Request, limit int64, v any, allowEmpty bool) error {
	err := json.NewDecoder(bodylimit.Wrap(w, r, limit, "", 0)).Decode(v)
	switch {
	case err == nil, allowEmpty && errors.Is(err, io.EOF):
		return nil
	case bodylimit.TooLarge(err):
		return err
	}
	return BodyError{err}
}

type requestIDKey struct{}

// RequestID is the ID the request's log lines and error answers carry.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// WithRequestID gives every request an ID, in its context and in the
// X-Request-Id header of its answer.
func WithRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id := hex.EncodeToString(b[:])
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
	})
}
