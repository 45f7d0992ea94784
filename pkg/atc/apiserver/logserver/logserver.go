// Package logserver answers Porter's routes that read a build's stored log
// by range, so that the build page of a huge log (gigabytes) opens at its
// end and pages and searches it without reading it whole (fly knows none
// of them; Concourse's events stream stays the whole log):
//
//	GET /api/v1/builds/{id}/log/outline
//	    the build's events but its steps' output (statuses, versions,
//	    errors): {"events":[{"id","event","version","data"}...],
//	    "last": the last stored record, "stored_bytes": the log's stored size}
//	GET /api/v1/builds/{id}/log?step=PLAN_ID[&before=ID|&after=ID][&limit=LINES]
//	    a step's output (log events) just before or after record ID, or at
//	    the end: at least limit lines (default 500, at most 10,000) in whole
//	    records: {"step","from","to","start","end","logs":[{"id","time","payload"}]};
//	    from is the cursor of the page before (before=from), to of the page
//	    after (after=to); start and end say there is none
//	GET /api/v1/builds/{id}/log/search?q=TEXT[&step=PLAN_ID][&limit=HITS][&cursor=C]
//	    the lines holding TEXT (case insensitive, terminal escapes left out),
//	    in log order, at most about limit (default 100, at most 1,000) and
//	    for at most searchBudget: {"hits":[{"step","id","k","time","text"}],
//	    "more", "next"}; the hit's line ends in the k-th newline of record
//	    id's payload; with more, cursor=next goes on
//
// Each is read with the build's events' permission (the API checks it).
// Output is as stored: credentials redacted.
package logserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// Logs reads builds' stored logs by range (buildlog.Logs).
type Logs interface {
	Page(ctx context.Context, buildID int64, q buildlog.PageQuery) (buildlog.Page, error)
	Outline(ctx context.Context, buildID int64) ([]buildlog.Record, uint64, int64, error)
	Search(ctx context.Context, buildID int64, q buildlog.SearchQuery) (buildlog.SearchResult, error)
}

// Server answers the routes; the API checks who may read the build.
type Server struct {
	Logs Logs
	Log  *slog.Logger
}

const (
	defaultLines = 500
	maxLines     = 10_000
	defaultHits  = 100
	maxHits      = 1_000
	maxQuery     = 1_000
	// searchBudget bounds one search request's time: a search of a huge
	// log answers what it found so far and where to go on.
	searchBudget = 15 * time.Second
)

// Event is a stored build event with its record's id.
type Event struct {
	ID uint64 `json:"id"`
	events.Envelope
}

// OutlineAnswer is the outline route's answer.
type OutlineAnswer struct {
	Events      []Event `json:"events"`
	Last        uint64  `json:"last"`
	StoredBytes int64   `json:"stored_bytes"`
}

// PageAnswer is the log route's answer.
type PageAnswer struct {
	Step  string            `json:"step"`
	From  uint64            `json:"from"`
	To    uint64            `json:"to"`
	Start bool              `json:"start"`
	End   bool              `json:"end"`
	Logs  []buildlog.Output `json:"logs"`
}

// SearchAnswer is the search route's answer.
type SearchAnswer struct {
	Hits []buildlog.Hit `json:"hits"`
	More bool           `json:"more"`
	Next string         `json:"next,omitempty"`
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	apierr.Fail(w, r, s.Log, err)
}

// Outline answers the build's events but its steps' output.
func (s *Server) Outline(w http.ResponseWriter, r *http.Request, b db.Build) {
	recs, last, stored, err := s.Logs.Outline(r.Context(), b.ID)
	if err != nil {
		s.fail(w, r, fmt.Errorf("outline of build %d's log: %w", b.ID, err))
		return
	}
	ans := OutlineAnswer{Events: make([]Event, 0, len(recs)), Last: last, StoredBytes: stored}
	for _, rec := range recs {
		ans.Events = append(ans.Events, Event{ID: rec.ID, Envelope: *rec.Event})
	}
	httpreply.JSON(w, http.StatusOK, ans)
}

// Page answers a step's output by range.
func (s *Server) Page(w http.ResponseWriter, r *http.Request, b db.Build) {
	q := r.URL.Query()
	step, err := stepOf(b, q.Get("step"), true)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	pq := buildlog.PageQuery{Origin: step}
	if pq.Before, err = recordID(q, "before"); err != nil {
		s.fail(w, r, err)
		return
	}
	if pq.After, err = recordID(q, "after"); err != nil {
		s.fail(w, r, err)
		return
	}
	if pq.Before > 0 && pq.After > 0 {
		s.fail(w, r, apierr.BadRequest(errors.New("give before or after, not both")))
		return
	}
	if pq.Lines, err = count(q, "limit", "lines", defaultLines, maxLines); err != nil {
		s.fail(w, r, err)
		return
	}
	p, err := s.Logs.Page(r.Context(), b.ID, pq)
	if err != nil {
		s.fail(w, r, fmt.Errorf("read build %d's log of step %s: %w", b.ID, step, err))
		return
	}
	if p.Logs == nil {
		p.Logs = []buildlog.Output{}
	}
	httpreply.JSON(w, http.StatusOK, PageAnswer{Step: step, From: p.From, To: p.To, Start: p.Start, End: p.End, Logs: p.Logs})
}

// Search answers the lines of the build's output that hold q.
func (s *Server) Search(w http.ResponseWriter, r *http.Request, b db.Build) {
	q := r.URL.Query()
	text := q.Get("q")
	switch {
	case text == "":
		s.fail(w, r, apierr.BadRequest(errors.New("q (the text to search the log for) is required")))
		return
	case len(text) > maxQuery:
		s.fail(w, r, apierr.BadRequest(fmt.Errorf("q is %d bytes long: at most %d", len(text), maxQuery)))
		return
	}
	step, err := stepOf(b, q.Get("step"), false)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sq := buildlog.SearchQuery{Text: text, Origin: step, Budget: searchBudget}
	if sq.Hits, err = count(q, "limit", "hits", defaultHits, maxHits); err != nil {
		s.fail(w, r, err)
		return
	}
	if c := q.Get("cursor"); c != "" {
		if sq.From, err = parseCursor(c); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	res, err := s.Logs.Search(r.Context(), b.ID, sq)
	if err != nil {
		s.fail(w, r, fmt.Errorf("search build %d's log: %w", b.ID, err))
		return
	}
	ans := SearchAnswer{Hits: res.Hits, More: res.More}
	if ans.Hits == nil {
		ans.Hits = []buildlog.Hit{}
	}
	if res.More {
		ans.Next = fmt.Sprintf("%d.%d.%d", res.Next.After, res.Next.PastID, res.Next.PastK)
	}
	httpreply.JSON(w, http.StatusOK, ans)
}

// parseCursor reads a search's cursor, AFTER.PASTID.PASTK as answered.
func parseCursor(c string) (buildlog.SearchCursor, error) {
	bad := apierr.BadRequest(fmt.Errorf("cursor %q is not one a search answered (next)", c))
	parts := strings.Split(c, ".")
	if len(parts) != 3 {
		return buildlog.SearchCursor{}, bad
	}
	var n [3]uint64
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 63)
		if err != nil {
			return buildlog.SearchCursor{}, bad
		}
		n[i] = v
	}
	if n[2] > 1<<31 {
		return buildlog.SearchCursor{}, bad
	}
	return buildlog.SearchCursor{After: n[0], PastID: n[1], PastK: int(n[2])}, nil
}

// recordID reads a record id parameter (0: not given).
func recordID(q map[string][]string, name string) (uint64, error) {
	v := ""
	if vs := q[name]; len(vs) > 0 {
		v = vs[0]
	}
	if v == "" {
		return 0, nil
	}
	id, err := strconv.ParseUint(v, 10, 63)
	if err != nil || id == 0 {
		return 0, apierr.BadRequest(fmt.Errorf("%s must be a record id (a whole number from 1), not %q", name, v))
	}
	return id, nil
}

// count reads a positive count parameter of at most most (def: not given).
func count(q map[string][]string, name, what string, def, most int) (int, error) {
	v := ""
	if vs := q[name]; len(vs) > 0 {
		v = vs[0]
	}
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, apierr.BadRequest(fmt.Errorf("%s must be a number of %s from 1 to %d, not %q", name, what, most, v))
	}
	return n, nil
}

// stepOf checks that step is one of the build's plan's steps (a plan id).
func stepOf(b db.Build, step string, required bool) (string, error) {
	if step == "" {
		if required {
			return "", apierr.BadRequest(errors.New("step (the plan id of one of the build's steps) is required"))
		}
		return "", nil
	}
	var plan any
	if len(b.Plan) > 0 {
		if err := json.Unmarshal(b.Plan, &plan); err != nil {
			return "", fmt.Errorf("read build %d's plan: %w", b.ID, err)
		}
	}
	if !hasID(plan, step) {
		return "", apierr.NotFound("Step Not Found Error", fmt.Sprintf("build %d has no step %q", b.ID, step))
	}
	return step, nil
}

// hasID says whether a plan (decoded JSON) holds a step of plan id id.
func hasID(v any, id string) bool {
	switch v := v.(type) {
	case map[string]any:
		if s, ok := v["id"].(string); ok && s == id {
			return true
		}
		for _, c := range v {
			if hasID(c, id) {
				return true
			}
		}
	case []any:
		for _, c := range v {
			if hasID(c, id) {
				return true
			}
		}
	}
	return false
}
