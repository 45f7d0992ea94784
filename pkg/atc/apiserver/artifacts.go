package apiserver

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/klauspost/compress/zstd"

	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// handleCreateArtifact stores a directory `fly execute -i` uploads (tar
// through gzip, as fly sends it) as a content-addressed artifact (tar
// through zstd) of the team's. A broken stream stores nothing.
func (s *Server) handleCreateArtifact(w http.ResponseWriter, r *http.Request, _ auth.Claims, team db.Team) {
	if p := r.URL.Query().Get("platform"); p != "" && p != "linux" {
		s.fail(w, r, badRequest(fmt.Errorf("platform %q: this server runs linux steps only", p)))
		return
	}
	// limitBodies bounds the body (--max-artifact-upload).
	a, err := uploadTgz(r.Context(), s.blobs, team.Name, r.Body)
	if err == nil {
		a = blobstore.DedupOrKeep(r.Context(), s.blobs, team.Name, a, s.log)
	}
	if big := (errBodyTooLarge{}); errors.As(err, &big) {
		s.log.Warn("artifact upload refused", "team", team.Name, "err", big)
		s.fail(w, r, withStatus(http.StatusRequestEntityTooLarge, fmt.Errorf("the uploaded directory is too large: %w", big)))
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

// uploadTgz recompresses a tar+gzip stream into the blobstore's format.
func uploadTgz(ctx context.Context, store blobstore.Store, team string, body io.Reader) (blobstore.Artifact, error) {
	gz, err := gzip.NewReader(body)
	if err != nil {
		return blobstore.Artifact{}, fmt.Errorf("read gzip: %w", err)
	}
	pr, pw := io.Pipe()
	go func() {
		enc, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err == nil {
			_, err = io.Copy(enc, gz)
			err = errors.Join(err, enc.Close())
		}
		pw.CloseWithError(err)
	}()
	a, err := blobstore.UploadStream(ctx, store, blobstore.NewBlobKey(team, blobstore.ATCBlobOwner), pr)
	pr.CloseWithError(err)
	return a, err
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
	dec, err := zstd.NewReader(rc, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(32<<20))
	if err != nil {
		s.fail(w, r, withStatus(http.StatusBadGateway, err))
		return
	}
	defer dec.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if _, err := io.Copy(gz, dec); err != nil {
		s.log.Warn("send artifact", "artifact", id, "err", err)
		return
	}
	_ = gz.Close()
}
