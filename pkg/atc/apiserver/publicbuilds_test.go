package apiserver

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/porter-ci/porter/pkg/db"
)

// withPublicBuilds adds builds to the exposed pipeline "pub": 20 of its
// public job j, 21 of its private job hidden; and 22 of hidden pipeline p's
// job j.
func withPublicBuilds(a *testAPI) {
	s := a.store
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jobs = append(s.jobs, db.Job{ID: 102, PipelineID: 11, PipelineName: "pub", TeamID: 1, TeamName: "main", Name: "hidden", Active: true,
		Config: json.RawMessage(`{"name":"hidden","plan":[{"get":"r"}]}`)})
	build := func(id, jobID int64, pipeline, job string) db.JobBuild {
		pid := int64(11)
		if pipeline == "p" {
			pid = 10
		}
		return db.JobBuild{Build: db.Build{ID: id, TeamID: 1, TeamName: "main", Name: "1", Status: "succeeded", Plan: json.RawMessage(`{"id":"1","task":{"name":"t"}}`)},
			PipelineID: pid, PipelineName: pipeline, JobID: jobID, JobName: job}
	}
	s.builds = append(s.builds, build(20, 101, "pub", "j"), build(21, 102, "pub", "hidden"), build(22, 100, "p", "j"))
}

// TestAnonymousReadsPublicBuilds: as in Concourse, anyone may list and read
// the builds of an exposed pipeline's jobs, and read the plan, events and
// artifacts of a public job's builds; nothing of a private job's build but
// the build itself, nothing at all of a hidden pipeline's or a one-off build.
func TestAnonymousReadsPublicBuilds(t *testing.T) {
	const (
		pub    = "/api/v1/teams/main/pipelines/pub/jobs/"
		hidden = "/api/v1/teams/main/pipelines/p/jobs/"
	)
	cases := []struct {
		path string
		want int
	}{
		{pub + "j/builds", http.StatusOK},
		{pub + "j/builds/1", http.StatusOK},
		{pub + "hidden/builds", http.StatusOK},
		{pub + "hidden/builds/1", http.StatusOK},
		{hidden + "j/builds", http.StatusUnauthorized},
		{hidden + "j/builds/1", http.StatusUnauthorized},
		{"/api/v1/builds/20", http.StatusOK},
		{"/api/v1/builds/20/plan", http.StatusOK},
		{"/api/v1/builds/20/events", http.StatusOK},
		{"/api/v1/builds/20/artifacts", http.StatusOK},
		{"/api/v1/builds/20/log?step=1", http.StatusOK},
		{"/api/v1/builds/20/log/outline", http.StatusOK},
		{"/api/v1/builds/20/log/search?q=x", http.StatusOK},
		{"/api/v1/builds/21", http.StatusOK},
		{"/api/v1/builds/21/plan", http.StatusUnauthorized},
		{"/api/v1/builds/21/events", http.StatusUnauthorized},
		{"/api/v1/builds/21/artifacts", http.StatusUnauthorized},
		{"/api/v1/builds/21/log?step=1", http.StatusUnauthorized},
		{"/api/v1/builds/21/log/outline", http.StatusUnauthorized},
		{"/api/v1/builds/21/log/search?q=x", http.StatusUnauthorized},
		{"/api/v1/builds/22", http.StatusUnauthorized},
		{"/api/v1/builds/22/events", http.StatusUnauthorized},
		{"/api/v1/builds/22/log?step=1", http.StatusUnauthorized},
		{"/api/v1/builds/1", http.StatusUnauthorized},        // one-off
		{"/api/v1/builds/1/events", http.StatusUnauthorized}, // one-off
		{"/api/v1/builds/3/events", http.StatusUnauthorized}, // a check's
	}
	a := newTestAPI(t)
	withPublicBuilds(a)
	other := a.token(t, "stranger", map[string]string{"other": "owner"})
	for _, c := range cases {
		ans := a.do(t, http.MethodGet, c.path, "", "")
		if ans.code != c.want {
			t.Errorf("anonymous GET %s: %d %s, want %d", c.path, ans.code, ans, c.want)
		}
		// A token without a role in main gets what anyone gets, but 403
		// for 401.
		want := c.want
		if want == http.StatusUnauthorized {
			want = http.StatusForbidden
		}
		if ans := a.do(t, http.MethodGet, c.path, other, ""); ans.code != want {
			t.Errorf("other team's owner GET %s: %d %s, want %d", c.path, ans.code, ans, want)
		}
	}
	builds := decode[[]map[string]any](t, a.do(t, http.MethodGet, pub+"j/builds", "", ""), http.StatusOK)
	if len(builds) != 1 || builds[0]["id"] != float64(20) {
		t.Errorf("anonymous builds of pub/j: %v, want build 20", builds)
	}
}
