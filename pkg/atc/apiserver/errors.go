package apiserver

import (
	"fmt"
	"net/http"
	"runtime/debug"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// fail answers an error (apierr.Fail).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	apierr.Fail(w, r, s.log, err)
}

// unavailable answers a request the user store could not serve (503).
func (s *Server) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	s.fail(w, r, apierr.WithStatus(http.StatusServiceUnavailable, err))
}

// decodeBody reads the request's JSON body (at most limit bytes) into v: a
// body that is not v's JSON is 400 naming what, one over the limit 413; an
// empty body leaves v as it is when allowEmpty.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any, what string, allowEmpty bool) error {
	if err := httpreply.Decode(w, r, limit, v, allowEmpty); err != nil {
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
			s.log.ErrorContext(r.Context(), "handler panicked", "request_id", httpreply.RequestID(r.Context()),
				"method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			s.fail(w, r, fmt.Errorf("handler panicked: %v", v))
		}()
		next.ServeHTTP(w, r)
	})
}
