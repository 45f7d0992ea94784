// Package artifactserver answers the artifact routes of Concourse's API
// that `fly execute` uses: a directory uploaded with -i, an output
// downloaded with -o.
package artifactserver

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
	"github.com/porter-ci/porter/pkg/httpreply/bodylimit"
	"github.com/porter-ci/porter/pkg/upload"
)

// Store records artifacts.
type Store interface {
	Artifact(ctx context.Context, id int64) (db.Artifact, error)
	CreateArtifact(ctx context.Context, a db.Artifact) (db.Artifact, error)
}

// Server holds the handlers' parts; the API checks who may call them.
type Server struct {
	Store Store
	Blobs blobstore.Store
	// Limits bound what an upload inflates to.
	Limits upload.Limits
	// Worker is the worker artifacts are recorded on.
	Worker string
	Log    *slog.Logger
}

// Create stores a directory `fly execute -i` uploads (tar
// through gzip, as fly sends it) as a content-addressed artifact (tar
// through zstd) of the team's. A broken stream stores nothing.
func (s *Server) Create(w http.ResponseWriter, r *http.Request, team db.Team) {
	if p := r.URL.Query().Get("platform"); p != "" && p != "linux" {
		apierr.Fail(w, r, s.Log, apierr.BadRequest(fmt.Errorf("platform %q: this server runs linux steps only", p)))
		return
	}
	// limitBodies bounds the body (--max-artifact-upload); upload.Store
	// what it inflates to, and checks it is a gzip'd tar as it streams.
	a, err := upload.Store(r.Context(), s.Blobs, blobstore.NewBlobKey(team.Name, blobstore.ATCBlobOwner), r.Body, s.Limits)
	if err == nil {
		a = blobstore.DedupOrKeep(r.Context(), s.Blobs, team.Name, a, s.Log)
	}
	if big, inflated := (bodylimit.Error{}), (*upload.LimitError)(nil); errors.As(err, &big) || errors.As(err, &inflated) {
		s.Log.Warn("artifact upload refused", "team", team.Name, "err", err)
		apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusRequestEntityTooLarge, fmt.Errorf("the uploaded directory is too large: %w", err)))
		return
	}
	if err != nil {
		s.Log.Warn("artifact upload failed", "team", team.Name, "err", err)
		apierr.Fail(w, r, s.Log, apierr.BadRequest(fmt.Errorf("store the uploaded directory: %w", err)))
		return
	}
	rec, err := s.Store.CreateArtifact(r.Context(), db.Artifact{TeamID: team.ID, Key: a.Key, Digest: a.Digest, Size: a.Size, WorkerName: s.Worker})
	if err != nil {
		apierr.Fail(w, r, s.Log, err)
		return
	}
	httpreply.JSON(w, http.StatusCreated, concourse.WorkerArtifact{ID: rec.ID, CreatedAt: rec.CreateTime.Unix()})
}

// Get sends an artifact as tar+gzip, as fly expects.
func (s *Server) Get(w http.ResponseWriter, r *http.Request, team db.Team) {
	id, err := strconv.ParseInt(r.PathValue("artifact_id"), 10, 64)
	if err != nil {
		apierr.Fail(w, r, s.Log, apierr.BadRequest(errors.New("artifact id must be a number")))
		return
	}
	a, err := s.Store.Artifact(r.Context(), id)
	if err == nil && a.TeamID != team.ID {
		err = db.ErrNotFound
	}
	if err != nil {
		apierr.Fail(w, r, s.Log, fmt.Errorf("artifact %d: %w", id, err))
		return
	}
	rc, _, err := s.Blobs.Get(r.Context(), a.Key)
	if err != nil {
		apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusBadGateway, fmt.Errorf("read artifact %d: %w", id, err)))
		return
	}
	defer rc.Close()
	tarStream, err := blobstore.ArtifactTar(rc)
	if err != nil {
		apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusBadGateway, err))
		return
	}
	defer tarStream.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if _, err := io.Copy(gz, tarStream); err != nil {
		s.Log.Warn("send artifact", "artifact", id, "err", err)
		return
	}
	_ = gz.Close()
}
