package apiserver

import (
	"io"
	"net/http"
	"regexp"
	"time"

	"github.com/porter-ci/porter/pkg/httpreply/bodylimit"
	"github.com/porter-ci/porter/pkg/upload"
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
// bodylimit.Error, which fail answers with 413.
func (s *Server) limitBodies(next http.Handler) http.Handler {
	lim := s.cfg.Limits
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit, flagName := lim.MaxRequestBody, "max-request-body"
		upload := r.Method == http.MethodPost && artifactUploadPath.MatchString(r.URL.Path)
		if upload {
			limit, flagName = lim.MaxArtifactUpload, "max-artifact-upload"
		}
		if r.ContentLength > limit {
			s.fail(w, r, bodylimit.Error{Limit: limit, Flag: flagName})
			return
		}
		// The server's read timeout would cut a large upload off: only a
		// stalled one is.
		var stall time.Duration
		if upload {
			stall = lim.UploadStall
		}
		r.Body = bodylimit.Wrap(w, r, limit, flagName, stall)
		next.ServeHTTP(w, r)
	})
}

// maxJSONBody bounds the small JSON documents routes take (a team, a new
// name, a pin comment); --max-request-body bounds every body before that.
const maxJSONBody = 1 << 20

// boundedBody is r's body bounded to limit bytes. Reading past the limit
// fails with a bodylimit.Error, which fail answers with 413 naming the
// limit, also for a body sent chunked: a body cut short instead would be
// answered 400 as broken JSON.
func boundedBody(w http.ResponseWriter, r *http.Request, limit int64) io.Reader {
	return bodylimit.Wrap(w, r, limit, "", 0)
}
