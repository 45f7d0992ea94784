package atc

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
)

// handleBuildEvents streams a build's events as server-sent events, from
// the start or after Last-Event-ID, live until the build ends.
func (s *Server) handleBuildEvents(w http.ResponseWriter, r *http.Request, rec db.Build) {
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
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache, no-store, must-revalidate")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-ATC-Stream-Version", "2.0")
	w.WriteHeader(http.StatusOK)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	write := func(recs []record) bool {
		for _, rec := range recs {
			from = rec.ID
			if rec.Event == nil {
				continue
			}
			if err := events.WriteSSE(w, rec.ID, *rec.Event); err != nil {
				return false
			}
		}
		flush()
		return true
	}
	ctx := r.Context()
	if b, ok := s.running(rec.ID); ok {
		s.streamLive(ctx, b, &from, write)
	} else {
		s.streamStored(ctx, rec, &from, write)
	}
	if ctx.Err() == nil {
		_ = events.WriteSSEEnd(w, from+1)
		flush()
	}
}

// streamLive follows a build this server runs until it ends.
func (s *Server) streamLive(ctx context.Context, b *build, from *uint64, write func([]record) bool) {
	for {
		// Whether the build had ended is read before the records, so the
		// records read include everything it ever logged.
		var finished bool
		select {
		case <-b.done:
			finished = true
		default:
		}
		recs, changed, err := b.log.since(ctx, *from)
		if err != nil {
			s.log.Warn("read build events", "build", b.id, "err", err)
			return
		}
		if !write(recs) || finished {
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

// streamStored serves a build's stored log: a finished build's, or one
// another server runs (polled until it ends).
func (s *Server) streamStored(ctx context.Context, rec db.Build, from *uint64, write func([]record) bool) {
	for {
		finished := concourse.BuildStatus(rec.Status).Finished()
		recs, err := readChunks(ctx, s.chunks(rec.ID), *from, 0)
		if err != nil {
			s.log.Warn("read build events", "build", rec.ID, "err", err)
			return
		}
		if !write(recs) || finished {
			return
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return
		}
		if rec, err = s.db.Build(ctx, rec.ID); err != nil {
			return
		}
		if b, ok := s.running(rec.ID); ok {
			s.streamLive(ctx, b, from, write)
			return
		}
	}
}

// handleBuildPlan answers the build's public plan: its shape and step
// names, without task configs or params.
func (s *Server) handleBuildPlan(w http.ResponseWriter, _ *http.Request, b db.Build) {
	var plan any
	if err := json.Unmarshal(b.Plan, &plan); err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"schema": "exec.v2", "plan": publicPlan(plan)})
}

// publicPlan strips what only the build's team may read from a plan.
func publicPlan(v any) any {
	switch n := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(n))
		for k, child := range n {
			switch k {
			case "task":
				if t, ok := child.(map[string]any); ok {
					out[k] = map[string]any{"name": t["name"], "privileged": t["privileged"], "hermetic": t["hermetic"]}
					continue
				}
			case "get", "put", "check":
				if t, ok := child.(map[string]any); ok {
					out[k] = map[string]any{"name": t["name"], "type": t["type"], "resource": t["resource"]}
					continue
				}
			}
			out[k] = publicPlan(child)
		}
		return out
	case []any:
		out := make([]any, len(n))
		for i, child := range n {
			out[i] = publicPlan(child)
		}
		return out
	}
	return v
}
