// Package adminserver answers the server-wide routes of Concourse's API
// that an admin uses (fly set-wall, get-components, pause-component,
// active-users) and the wall every fly command shows.
package adminserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/auth"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// Store is the database as these handlers use it.
type Store interface {
	Wall(ctx context.Context) (db.Wall, error)
	SetWall(ctx context.Context, w db.Wall) error
	ClearWall(ctx context.Context) error
	Components(ctx context.Context) ([]db.Component, error)
	SetComponentPaused(ctx context.Context, name string, paused bool) error
	ActiveUsers(ctx context.Context, since time.Time) ([]db.User, error)
}

// maxBody bounds a wall's JSON.
const maxBody = 1 << 20

// Server holds the handlers' parts; the API checks who may call them.
type Server struct {
	Store Store
	Log   *slog.Logger
	// WakeScheduler runs the scheduler now (a component unpaused).
	WakeScheduler func()
}

// Wall is Concourse's Wall: TTL is the time left, in nanoseconds.
type Wall struct {
	Message string        `json:"message,omitempty"`
	TTL     time.Duration `json:"TTL,omitempty"`
}

// GetWall is `fly get-wall`, and what every fly command shows: public.
func (s *Server) GetWall(w http.ResponseWriter, r *http.Request) {
	cur, err := s.Store.Wall(r.Context())
	if err != nil {
		apierr.Fail(w, r, s.Log, err)
		return
	}
	out := Wall{Message: cur.Message}
	if !cur.Expires.IsZero() {
		out.TTL = max(time.Until(cur.Expires), time.Second).Truncate(time.Second)
	}
	httpreply.JSON(w, http.StatusOK, out)
}

// SetWall is `fly set-wall [--ttl]`.
func (s *Server) SetWall(w http.ResponseWriter, r *http.Request) {
	var in Wall
	if err := httpreply.Decode(w, r, maxBody, &in, false); err != nil {
		apierr.Fail(w, r, s.Log, fmt.Errorf("decode the wall: %w", err))
		return
	}
	if in.Message == "" {
		apierr.Fail(w, r, s.Log, apierr.BadRequest(errors.New("wall message cannot be empty")))
		return
	}
	if in.TTL < 0 {
		apierr.Fail(w, r, s.Log, apierr.BadRequest(fmt.Errorf("wall TTL %s: want a positive duration", in.TTL)))
		return
	}
	set := db.Wall{Message: in.Message}
	if in.TTL > 0 {
		set.Expires = time.Now().Add(in.TTL)
	}
	if err := s.Store.SetWall(r.Context(), set); err != nil {
		apierr.Fail(w, r, s.Log, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// ClearWall is `fly clear-wall`.
func (s *Server) ClearWall(w http.ResponseWriter, r *http.Request) {
	if err := s.Store.ClearWall(r.Context()); err != nil {
		apierr.Fail(w, r, s.Log, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// Component is Concourse's Component.
type Component struct {
	Name     string        `json:"name"`
	Interval time.Duration `json:"interval"`
	LastRan  time.Time     `json:"last_ran"`
	Paused   bool          `json:"paused"`
}

// Components is `fly get-components`: the servers' periodic loops
// (scheduler, scanner: the checks, collector: GC).
func (s *Server) Components(w http.ResponseWriter, r *http.Request) {
	cs, err := s.Store.Components(r.Context())
	if err != nil {
		apierr.Fail(w, r, s.Log, err)
		return
	}
	out := []Component{}
	for _, c := range cs {
		out = append(out, Component{Name: c.Name, Interval: c.Interval, LastRan: c.LastRan, Paused: c.Paused})
	}
	httpreply.JSON(w, http.StatusOK, out)
}

// ComponentSwitch is `fly pause-component`/`unpause-component` (-a: every
// one): every server's loop of that name stops or starts at its next pass.
func (s *Server) ComponentSwitch(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("component_name")
		err := s.Store.SetComponentPaused(r.Context(), componentOf(name), paused)
		if errors.Is(err, db.ErrNotFound) {
			// fly prints its own "component 'x' not found" for a 404.
			apierr.Fail(w, r, s.Log, apierr.NotFound("Component Not Found Error", fmt.Sprintf("component '%s' not found", name)))
			return
		}
		if err != nil {
			apierr.Fail(w, r, s.Log, err)
			return
		}
		if !paused {
			s.WakeScheduler()
		}
		w.WriteHeader(http.StatusOK)
	}
}

// componentOf is the Porter component that does the work of a Concourse
// component, so that fly's --runtime-components and --gc-components (which
// name Concourse's) pause and unpause Porter's: the build tracker's and the
// scheduler's work is the scheduler's, every collector's, the reaper's and
// the pipeline pauser's is the collector's. Other names stay as they are.
func componentOf(name string) string {
	switch {
	case name == "tracker":
		return "scheduler"
	case name == "reaper", name == "pipeline_pauser", strings.HasPrefix(name, "collector_"):
		return "collector"
	}
	return name
}

// ActiveUser is Concourse's User.
type ActiveUser struct {
	ID        int    `json:"id,omitempty"`
	Username  string `json:"username,omitempty"`
	Connector string `json:"connector,omitempty"`
	LastLogin int64  `json:"last_login,omitempty"`
	Sub       string `json:"sub,omitempty"`
}

// ActiveUsers is `fly active-users [--since yyyy-mm-dd]`.
func (s *Server) ActiveUsers(w http.ResponseWriter, r *http.Request) {
	var since time.Time
	if v := r.URL.Query().Get("since"); v != "" {
		t, err := time.Parse(time.DateOnly, v)
		if err != nil {
			apierr.Fail(w, r, s.Log, apierr.BadRequest(fmt.Errorf("since=%q: wrong date format (yyyy-mm-dd)", v)))
			return
		}
		since = t
	}
	us, err := s.Store.ActiveUsers(r.Context(), since)
	if err != nil {
		apierr.Fail(w, r, s.Log, err)
		return
	}
	out := []ActiveUser{}
	for _, u := range us {
		out = append(out, ActiveUser{Username: u.Name, Connector: u.Connector, LastLogin: u.LastLogin.Unix(),
			Sub: auth.SubjectFor(u.Connector, u.Name)})
	}
	httpreply.JSON(w, http.StatusOK, out)
}
