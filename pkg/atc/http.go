package atc

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/events"
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/artifacts", s.handleUploadArtifact)
	mux.HandleFunc("GET /api/v1/artifacts/{key...}", s.handleDownloadArtifact)
	mux.HandleFunc("POST /api/v1/builds", s.handleCreateBuild)
	mux.HandleFunc("GET /api/v1/builds", s.handleListBuilds)
	mux.HandleFunc("GET /api/v1/builds/{id}", s.handleGetBuild)
	mux.HandleFunc("GET /api/v1/builds/{id}/events", s.handleBuildEvents)
	mux.HandleFunc("PUT /api/v1/builds/{id}/abort", s.handleAbortBuild)
	mux.HandleFunc("GET /api/v1/builds/{id}/intercept", s.handleIntercept)
	mux.HandleFunc("GET /api/v1/builds/{id}/audit", s.handleAudit)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, api.Error{Error: err.Error()})
}

func (s *Server) handleUploadArtifact(w http.ResponseWriter, r *http.Request) {
	a, err := blobstore.UploadStream(r.Context(), s.store, r.Body)
	if err != nil {
		s.log.Warn("artifact upload failed", "err", err)
		writeError(w, http.StatusBadGateway, err)
		return
	}
	writeJSON(w, http.StatusCreated, api.ArtifactRef{Key: a.Key, Digest: a.Digest, Size: a.Size})
}

func (s *Server) handleDownloadArtifact(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	// Only artifacts are served: not audit records, caches or the ATC's state.
	if !strings.HasPrefix(key, "artifacts/") || strings.Contains(key, "..") {
		writeError(w, http.StatusNotFound, errors.New("no such artifact"))
		return
	}
	rc, info, err := s.store.Get(r.Context(), key)
	if errors.Is(err, blobstore.ErrNotFound) {
		writeError(w, http.StatusNotFound, errors.New("no such artifact"))
		return
	}
	if err != nil {
		writeError(w, http.StatusBadGateway, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", blobstore.ArtifactContentType)
	if info.Size > 0 {
		w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	}
	_, _ = io.Copy(w, rc)
}

func (s *Server) handleCreateBuild(w http.ResponseWriter, r *http.Request) {
	var req api.CreateBuildRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 4<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, errors.New("decode build request: "+err.Error()))
		return
	}
	b, err := s.CreateBuild(r.Context(), req)
	var bad badRequest
	switch {
	case errors.As(err, &bad):
		writeError(w, http.StatusBadRequest, err)
	case err != nil:
		writeError(w, http.StatusInternalServerError, err)
	default:
		w.Header().Set("Location", api.BuildPath(b.ID))
		writeJSON(w, http.StatusCreated, b)
	}
}

func (s *Server) handleListBuilds(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.listBuilds())
}

func (s *Server) buildFromPath(w http.ResponseWriter, r *http.Request) (*build, bool) {
	id, err := parseBuildID(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return nil, false
	}
	b, ok := s.build(id)
	if !ok {
		writeError(w, http.StatusNotFound, errors.New("no such build"))
		return nil, false
	}
	return b, true
}

func (s *Server) handleGetBuild(w http.ResponseWriter, r *http.Request) {
	if b, ok := s.buildFromPath(w, r); ok {
		writeJSON(w, http.StatusOK, b.snapshot())
	}
}

func (s *Server) handleAbortBuild(w http.ResponseWriter, r *http.Request) {
	if b, ok := s.buildFromPath(w, r); ok {
		b.abort()
		w.WriteHeader(http.StatusNoContent)
	}
}

// handleBuildEvents streams a build's events as server-sent events, from
// the start or after Last-Event-ID, live until the build ends.
func (s *Server) handleBuildEvents(w http.ResponseWriter, r *http.Request) {
	b, ok := s.buildFromPath(w, r)
	if !ok {
		return
	}
	var from uint64
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		v, err := strconv.ParseUint(last, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, errors.New("Last-Event-ID must be a number"))
			return
		}
		from = v
	}
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-ATC-Stream-Version", "2.0")
	w.WriteHeader(http.StatusOK)
	ctx := r.Context()
	for {
		// Whether the build had ended is read before the records, so the
		// records read include everything it ever logged.
		var finished bool
		select {
		case <-b.done:
			finished = true
		default:
		}
		recs, changed, err := b.log.since(ctx, from)
		if err != nil {
			s.log.Warn("read build events", "build", b.info.ID, "err", err)
			return
		}
		for _, rec := range recs {
			from = rec.ID
			if rec.Event == nil {
				continue
			}
			if err := events.WriteSSE(w, rec.ID, *rec.Event); err != nil {
				return
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
		if finished {
			_ = events.WriteSSEEnd(w, from+1)
			if flusher != nil {
				flusher.Flush()
			}
			return
		}
		select {
		case <-changed:
		case <-b.done:
		case <-ctx.Done():
			return
		}
	}
}
