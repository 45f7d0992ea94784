package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// handleBuildEvents streams a build's events as server-sent events, from
// the start or after Last-Event-ID, live until the build ends.
func (s *Server) handleBuildEvents(w http.ResponseWriter, r *http.Request, rec db.Build) {
	var from uint64
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		v, err := strconv.ParseUint(last, 10, 64)
		if err != nil {
			s.fail(w, r, apierr.BadRequest(errors.New("Last-Event-ID must be a number")))
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
	write := func(recs []buildlog.Record) bool {
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
	for recs := range s.events.Events(ctx, rec, from) {
		if !write(recs) {
			break
		}
	}
	if ctx.Err() == nil {
		_ = events.WriteSSEEnd(w, from+1)
		flush()
	}
}

// handleBuildPlan answers the build's public plan: its shape and step
// names, without task configs or params. A job's build has none until the
// scheduler starts it: 404, as Concourse answers then.
func (s *Server) handleBuildPlan(w http.ResponseWriter, r *http.Request, b db.Build) {
	if p := bytes.TrimSpace(b.Plan); len(p) == 0 || bytes.Equal(p, []byte("null")) || bytes.Equal(p, []byte("{}")) {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	var plan any
	if err := json.Unmarshal(b.Plan, &plan); err != nil {
		s.fail(w, r, err)
		return
	}
	httpreply.JSON(w, http.StatusOK, map[string]any{"schema": "exec.v2", "plan": concourse.PublicPlanTree(plan)})
}
