package apiserver

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply/bodylimit"
	"github.com/porter-ci/porter/pkg/upload"
)

// handleCreateArtifact stores a directory `fly execute -i` uploads (tar
// through gzip, as fly sends it) as a content-addressed artifact (tar
// through zstd) of the team's. A broken stream stores nothing.
func (s *Server) handleCreateArtifact(w http.ResponseWriter, r *http.Request, _ auth.Claims, team db.Team) {
	if p := r.URL.Query().Get("platform"); p != "" && p != "linux" {
		s.fail(w, r, badRequest(fmt.Errorf("platform %q: this server runs linux steps only", p)))
		return
	}
	// limitBodies bounds the body (--max-artifact-upload); upload.Store
	// what it inflates to, and checks it is a gzip'd tar as it streams.
	a, err := upload.Store(r.Context(), s.blobs, blobstore.NewBlobKey(team.Name, blobstore.ATCBlobOwner), r.Body, s.cfg.Limits.Upload)
	if err == nil {
		a = blobstore.DedupOrKeep(r.Context(), s.blobs, team.Name, a, s.log)
	}
	if big, inflated := (bodylimit.Error{}), (*upload.LimitError)(nil); errors.As(err, &big) || errors.As(err, &inflated) {
		s.log.Warn("artifact upload refused", "team", team.Name, "err", err)
		s.fail(w, r, withStatus(http.StatusRequestEntityTooLarge, fmt.Errorf("the uploaded directory is too large: %w", err)))
		return
	}
	if err != nil {
		s.log.Warn("artifact upload failed", "team", team.Name, "err", err)
		s.fail(w, r, badRequest(fmt.Errorf("store the uploaded directory: %w", err)))
		return
	}
	rec, err := s.store.CreateArtifact(r.Context(), db.Artifact{TeamID: team.ID, Key: a.Key, Digest: a.Digest, Size: a.Size, WorkerName: s.cfg.ArtifactWorker})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, concourse.WorkerArtifact{ID: rec.ID, CreatedAt: rec.CreateTime.Unix()})
}

// handleGetArtifact sends an artifact as tar+gzip, as fly expects.
func (s *Server) handleGetArtifact(w http.ResponseWriter, r *http.Request, _ auth.Claims, team db.Team) {
	id, err := strconv.ParseInt(r.PathValue("artifact_id"), 10, 64)
	if err != nil {
		s.fail(w, r, badRequest(errors.New("artifact id must be a number")))
		return
	}
	a, err := s.store.Artifact(r.Context(), id)
	if err == nil && a.TeamID != team.ID {
		err = db.ErrNotFound
	}
	if err != nil {
		s.fail(w, r, fmt.Errorf("artifact %d: %w", id, err))
		return
	}
	rc, _, err := s.blobs.Get(r.Context(), a.Key)
	if err != nil {
		s.fail(w, r, withStatus(http.StatusBadGateway, fmt.Errorf("read artifact %d: %w", id, err)))
		return
	}
	defer rc.Close()
	tarStream, err := blobstore.ArtifactTar(rc)
	if err != nil {
		s.fail(w, r, withStatus(http.StatusBadGateway, err))
		return
	}
	defer tarStream.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if _, err := io.Copy(gz, tarStream); err != nil {
		s.log.Warn("send artifact", "artifact", id, "err", err)
		return
	}
	_ = gz.Close()
}
