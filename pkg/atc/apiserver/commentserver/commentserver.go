// Package commentserver answers Concourse's SetBuildComment,
// PUT /api/v1/builds/{build_id}/comment with {"comment": "..."}: a note on
// a build, shown in its page's header and in its job's build list. The API
// checks who may write it (Concourse's rule: pipeline-operator or above in
// the build's team); an empty comment removes it. The build page shows it as
// text, never as markup.
package commentserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// MaxBytes bounds a comment: a note, not a log (Concourse sets none).
const MaxBytes = 10 << 10

// maxBody is the largest request a comment of MaxBytes fits in, with its
// JSON escapes (\uXXXX is six bytes for one).
const maxBody = 6*MaxBytes + 1024

// Store holds the comments (*db.DB).
type Store interface {
	SetBuildComment(ctx context.Context, id int64, comment string) error
}

// Server writes builds' comments.
type Server struct {
	Store Store
	Log   *slog.Logger
}

// Set replaces the comment of b, answering 200 with no body as Concourse
// does.
func (s *Server) Set(w http.ResponseWriter, r *http.Request, _ auth.Claims, b db.Build) {
	var body struct {
		// A pointer: a body without "comment" is a mistake, not a removal.
		Comment *string `json:"comment"`
	}
	if err := httpreply.Decode(w, r, maxBody, &body, false); err != nil {
		apierr.Fail(w, r, s.Log, fmt.Errorf("decode the build comment: %w", err))
		return
	}
	if err := check(body.Comment); err != nil {
		apierr.Fail(w, r, s.Log, apierr.BadRequest(err))
		return
	}
	if err := s.Store.SetBuildComment(r.Context(), b.ID, *body.Comment); err != nil {
		apierr.Fail(w, r, s.Log, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
}

// check tells what is wrong with a comment, nil when nothing is.
func check(c *string) error {
	switch {
	case c == nil:
		return errors.New(`the body must be {"comment": "text"} ("" removes the comment); it has no "comment"`)
	case len(*c) > MaxBytes:
		return fmt.Errorf("the comment is %d bytes, over the %d bytes (10 KiB) a build's comment may hold", len(*c), MaxBytes)
	case strings.ContainsRune(*c, 0):
		// PostgreSQL's text cannot hold it.
		return errors.New("the comment holds a NUL character (\\u0000), which a comment may not")
	}
	return nil
}
