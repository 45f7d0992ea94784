package apiserver

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"time"

	"github.com/porter-ci/porter/pkg/upload"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Limits bound request bodies.
type Limits struct {
	// MaxArtifactUpload bounds one `fly execute -i` upload (as sent:
	// tar+gzip); MaxRequestBody any other request's body.
	MaxArtifactUpload int64
	MaxRequestBody    int64
	// UploadStall bounds the wait for each read of an upload, so a large
	// upload on a slow link still goes through but a stalled one does not.
	UploadStall time.Duration
	// Upload caps what an upload inflates to (checked as it streams).
	Upload upload.Limits
}

func (l Limits) withDefaults() Limits {
	if l.MaxArtifactUpload <= 0 {
		l.MaxArtifactUpload = 10 << 30
	}
	if l.MaxRequestBody <= 0 {
		l.MaxRequestBody = 8 << 20
	}
	if l.UploadStall <= 0 {
		l.UploadStall = time.Minute
	}
	l.Upload = l.Upload.WithDefaults()
	return l
}

// artifactUploadPath is the route of `fly execute -i` uploads.
var artifactUploadPath = regexp.MustCompile(`^/api/v1/teams/[^/]+/artifacts/?$`)

// limitBodies bounds every request's body: uploads by MaxArtifactUpload,
// the rest by MaxRequestBody. A body declared too large is refused before
// it is read; one that turns out too large fails its read with an
// errBodyTooLarge, which fail answers with 413.
func (s *Server) limitBodies(next http.Handler) http.Handler {
	lim := s.cfg.Limits
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, flagName := lim.MaxRequestBody, "max-request-body"
		upload := r.Method == http.MethodPost && artifactUploadPath.MatchString(r.URL.Path)
		if upload {
			limit, flagName = lim.MaxArtifactUpload, "max-artifact-upload"
		}
		if r.ContentLength > limit {
			s.fail(w, r, bodyTooLarge(limit, flagName))
			return
		}
		body := io.ReadCloser(http.MaxBytesReader(w, r.Body, limit))
		if upload {
			// The server's read timeout would cut a large upload off:
			// only a stalled one is.
			body = &stallReader{ReadCloser: body, rc: http.NewResponseController(w), stall: lim.UploadStall}
		}
		r.Body = &limitedBody{ReadCloser: body, limit: limit, flag: flagName}
		next.ServeHTTP(w, r)
	})
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
		err = bodyTooLarge(b.limit, b.flag)
	}
	return n, err
}

// errBodyTooLarge is a request body over the server's limit (HTTP 413).
type errBodyTooLarge struct {
	limit int64
	flag  string
}

func (e errBodyTooLarge) Error() string {
	return fmt.Sprintf("request body too large: this server accepts at most %s (%d bytes; serve --%s)",
		resource.NewQuantity(e.limit, resource.BinarySI), e.limit, e.flag)
}

func bodyTooLarge(limit int64, flag string) error { return errBodyTooLarge{limit: limit, flag: flag} }

// tooLarge reports whether err is a body over its limit.
func tooLarge(err error) bool {
	var e errBodyTooLarge
	var mb *http.MaxBytesError
	return errors.As(err, &e) || errors.As(err, &mb)
}

// stallReader moves the connection's read deadline forward before each
// read, so that the deadline bounds a stall rather than the whole body.
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
