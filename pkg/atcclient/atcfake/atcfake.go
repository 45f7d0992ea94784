// Package atcfake is an in-memory stand-in for the ATC's HTTP API with
// scripted builds, for tests of clients (package atcclient, the CLI). It is
// not the server: builds do not run, they replay the events they are given.
package atcfake

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/events"
)

// Build is a scripted build.
type Build struct {
	api.Build
	// Events are replayed on the event stream, numbered from 1.
	Events []events.Event
	// WaitForAbort holds the stream after Events until the build is
	// aborted; then a status "aborted" event ends it.
	WaitForAbort bool
	// CutAfter, if positive, ends the first connection to the stream after
	// that many events without the "end" event.
	CutAfter int
	// BreakAfter is CutAfter, but the connection is broken off mid-response
	// instead of ended cleanly.
	BreakAfter int

	aborted chan struct{}
	cut     bool
}

// Server is the fake ATC.
type Server struct {
	*httptest.Server

	mu        sync.Mutex
	artifacts map[string][]byte
	uploads   []Upload
	builds    map[int64]*Build
	nextID    int64
	creates   []api.CreateBuildRequest
	aborts    []int64
	lastIDs   []string

	// OnCreate scripts the build a POST /api/v1/builds creates; it may
	// return an error, which is answered as a 400. Without it, builds
	// succeed at once.
	OnCreate func(req api.CreateBuildRequest) (*Build, error)
}

// Upload is an artifact upload as received.
type Upload struct {
	ContentType string
	Ref         api.ArtifactRef
}

// New starts a fake ATC; it stops with the test.
func New(t interface{ Cleanup(func()) }) *Server {
	s := &Server{artifacts: map[string][]byte{}, builds: map[int64]*Build{}, nextID: 1}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/artifacts", s.postArtifact)
	mux.HandleFunc("GET /api/v1/artifacts/{key...}", s.getArtifact)
	mux.HandleFunc("POST /api/v1/builds", s.postBuild)
	mux.HandleFunc("GET /api/v1/builds", s.listBuilds)
	mux.HandleFunc("GET /api/v1/builds/{id}", s.getBuild)
	mux.HandleFunc("GET /api/v1/builds/{id}/events", s.getEvents)
	mux.HandleFunc("PUT /api/v1/builds/{id}/abort", s.abortBuild)
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// AddBuild adds a scripted build (its ID chosen if zero) and returns its ID.
func (s *Server) AddBuild(b *Build) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addLocked(b)
}

func (s *Server) addLocked(b *Build) int64 {
	if b.ID == 0 {
		b.ID = s.nextID
	}
	s.nextID = max(s.nextID, b.ID+1)
	b.aborted = make(chan struct{})
	s.builds[b.ID] = b
	return b.ID
}

// PutArtifact stores a stream as an artifact and returns its ref.
func (s *Server) PutArtifact(data []byte) api.ArtifactRef {
	sum := sha256.Sum256(data)
	ref := api.ArtifactRef{
		Key:    "artifacts/" + hex.EncodeToString(sum[:]) + ".tar.zst",
		Digest: "sha256:" + hex.EncodeToString(sum[:]),
		Size:   int64(len(data)),
	}
	s.mu.Lock()
	s.artifacts[ref.Key] = data
	s.mu.Unlock()
	return ref
}

// Artifact returns a stored artifact's stream.
func (s *Server) Artifact(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, ok := s.artifacts[key]
	return data, ok
}

// Uploads lists the artifact uploads received.
func (s *Server) Uploads() []Upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.uploads)
}

// Creates lists the create-build requests received.
func (s *Server) Creates() []api.CreateBuildRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.creates)
}

// Aborts lists the builds abort was asked for.
func (s *Server) Aborts() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.aborts)
}

// LastEventIDs lists the Last-Event-ID of every event stream request.
func (s *Server) LastEventIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lastIDs)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, api.Error{Error: fmt.Sprintf(format, args...)})
}

func (s *Server) postArtifact(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "read body: %v", err)
		return
	}
	ref := s.PutArtifact(data)
	s.mu.Lock()
	s.uploads = append(s.uploads, Upload{ContentType: r.Header.Get("Content-Type"), Ref: ref})
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, ref)
}

func (s *Server) getArtifact(w http.ResponseWriter, r *http.Request) {
	data, ok := s.Artifact(r.PathValue("key"))
	if !ok {
		writeError(w, http.StatusNotFound, "artifact %q not found", r.PathValue("key"))
		return
	}
	w.Header().Set("Content-Type", "application/zstd")
	_, _ = w.Write(data)
}

func (s *Server) postBuild(w http.ResponseWriter, r *http.Request) {
	var req api.CreateBuildRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "decode request: %v", err)
		return
	}
	s.mu.Lock()
	s.creates = append(s.creates, req)
	s.mu.Unlock()
	b := &Build{Build: api.Build{Name: "one-off", Team: "main", Status: api.StatusSucceeded}, Events: []events.Event{
		events.Status{Status: events.StatusSucceeded},
	}}
	if s.OnCreate != nil {
		var err error
		if b, err = s.OnCreate(req); err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
	}
	s.mu.Lock()
	s.addLocked(b)
	out := b.Build
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) listBuilds(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	out := []api.Build{}
	for _, b := range s.builds {
		out = append(out, b.Build)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(x, y api.Build) int { return int(y.ID - x.ID) })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) build(w http.ResponseWriter, r *http.Request) *Build {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad build id %q", r.PathValue("id"))
		return nil
	}
	s.mu.Lock()
	b := s.builds[id]
	s.mu.Unlock()
	if b == nil {
		writeError(w, http.StatusNotFound, "build %d not found", id)
	}
	return b
}

func (s *Server) getBuild(w http.ResponseWriter, r *http.Request) {
	if b := s.build(w, r); b != nil {
		s.mu.Lock()
		out := b.Build
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	}
}

func (s *Server) abortBuild(w http.ResponseWriter, r *http.Request) {
	b := s.build(w, r)
	if b == nil {
		return
	}
	s.mu.Lock()
	s.aborts = append(s.aborts, b.ID)
	select {
	case <-b.aborted:
	default:
		close(b.aborted)
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) getEvents(w http.ResponseWriter, r *http.Request) {
	b := s.build(w, r)
	if b == nil {
		return
	}
	from := 0
	last := r.Header.Get("Last-Event-ID")
	if last != "" {
		n, err := strconv.Atoi(last)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad Last-Event-ID %q", last)
			return
		}
		from = n
	}
	s.mu.Lock()
	s.lastIDs = append(s.lastIDs, last)
	cutAt, broken := 0, false
	if !b.cut && (b.CutAfter > 0 || b.BreakAfter > 0) {
		b.cut = true
		cutAt = max(b.CutAfter, b.BreakAfter)
		broken = b.BreakAfter > 0
	}
	s.mu.Unlock()

	w.Header().Set("Content-Type", events.SSEContentType)
	w.Header().Set(events.StreamVersionHeader, events.StreamVersion)
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	send := func(id int, e events.Event) bool {
		env, err := events.NewEnvelope(e)
		if err != nil {
			panic(err)
		}
		if err := events.WriteSSE(w, uint64(id), env); err != nil {
			return false
		}
		flusher.Flush()
		return true
	}

	evs := b.Events
	for i := from; i < len(evs); i++ {
		if cutAt > 0 && i-from == cutAt {
			if broken {
				panic(http.ErrAbortHandler) // the connection is dropped mid-response
			}
			return
		}
		if !send(i+1, evs[i]) {
			return
		}
	}
	next := max(len(evs), from) + 1
	if b.WaitForAbort {
		select {
		case <-b.aborted:
		case <-r.Context().Done():
			return
		}
		s.mu.Lock()
		b.Status = api.StatusAborted
		b.EndTime = time.Now().Unix()
		s.mu.Unlock()
		if !send(next, events.Status{Status: events.StatusAborted, Time: time.Now().Unix()}) {
			return
		}
		next++
	}
	_ = events.WriteSSEEnd(w, uint64(next))
	flusher.Flush()
}
