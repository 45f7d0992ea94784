// Package bodylimit bounds a request body and names the limit, and the
// server flag that sets it, when the body goes over.
package bodylimit

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Error is a request body over the server's limit (HTTP 413). Flag is
// the server flag that sets the limit; "" for a route's own fixed one.
type Error struct {
	Limit int64
	Flag  string
}

func (e Error) Error() string {
	size := resource.NewQuantity(e.Limit, resource.BinarySI)
	if e.Flag == "" {
		return fmt.Sprintf("request body too large: this request may have at most %s (%d bytes)", size, e.Limit)
	}
	return fmt.Sprintf("request body too large: this server accepts at most %s (%d bytes; serve --%s)", size, e.Limit, e.Flag)
}

// TooLarge reports whether err is a body over its limit.
func TooLarge(err error) bool {
	var e Error
	var mb *http.MaxBytesError
	return errors.As(err, &e) || errors.As(err, &mb)
}

// Wrap bounds r's body to limit (set by flag). With stall > 0 each read
// moves the connection's read deadline forward, so that the deadline
// bounds a stall rather than the whole body (a large upload).
func Wrap(w http.ResponseWriter, r *http.Request, limit int64, flag string, stall time.Duration) io.ReadCloser {
	body := io.ReadCloser(http.MaxBytesReader(w, r.Body, limit))
	if stall > 0 {
		body = &stallReader{ReadCloser: body, rc: http.NewResponseController(w), stall: stall}
	}
	return &limitedBody{ReadCloser: body, limit: limit, flag: flag}
}

// limitedBody names the limit and its flag when the body exceeds it.
type limitedBody struct {
	io.ReadCloser
	limit int64
	flag  string
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if mb := (*http.MaxBytesError)(nil); errors.As(err, &mb) {
		err = Error{Limit: b.limit, Flag: b.flag}
	}
	return n, err
}

type stallReader struct {
	io.ReadCloser
	rc    *http.ResponseController
	stall time.Duration
}

func (r *stallReader) Read(p []byte) (int, error) {
	// An error means the connection cannot take deadlines (HTTP/2 before
	// Go supports it, a test recorder): the server's own then applies.
	_ = r.rc.SetReadDeadline(time.Now().Add(r.stall))
	return r.ReadCloser.Read(p)
}
