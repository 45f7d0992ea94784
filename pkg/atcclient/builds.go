package atcclient

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/concourse"
)

func buildPath(id int64) string { return "/api/v1/builds/" + strconv.FormatInt(id, 10) }

// CreateBuild starts a one-off build of plan in team (the client's team
// when empty): POST /api/v1/teams/{team}/builds.
func (c *Client) CreateBuild(ctx context.Context, team string, plan concourse.Plan) (concourse.Build, error) {
	var b concourse.Build
	err := c.do(ctx, request{op: "create build", method: http.MethodPost, path: c.teamPath(team) + "/builds", json: plan}, &b)
	return b, err
}

// Build is GET /api/v1/builds/{id}.
func (c *Client) Build(ctx context.Context, id int64) (concourse.Build, error) {
	var b concourse.Build
	err := c.do(ctx, request{op: fmt.Sprintf("get build %d", id), method: http.MethodGet, path: buildPath(id)}, &b)
	return b, err
}

// Builds lists the newest builds the token may see, at most limit of them
// (0: the server's default): GET /api/v1/builds?limit=N.
func (c *Client) Builds(ctx context.Context, limit int) ([]concourse.Build, error) {
	var bs []concourse.Build
	err := c.do(ctx, request{op: "list builds", method: http.MethodGet, path: "/api/v1/builds", query: limitQuery(limit)}, &bs)
	return bs, err
}

// TeamBuilds lists a team's newest builds: GET /api/v1/teams/{team}/builds.
func (c *Client) TeamBuilds(ctx context.Context, team string, limit int) ([]concourse.Build, error) {
	var bs []concourse.Build
	err := c.do(ctx, request{op: "list builds of team " + team, method: http.MethodGet, path: c.teamPath(team) + "/builds", query: limitQuery(limit)}, &bs)
	return bs, err
}

func limitQuery(limit int) url.Values {
	if limit <= 0 {
		return nil
	}
	return url.Values{"limit": {strconv.Itoa(limit)}}
}

// AbortBuild asks the server to abort a build: PUT /api/v1/builds/{id}/abort.
// The build ends later; its event stream says when.
func (c *Client) AbortBuild(ctx context.Context, id int64) error {
	return c.do(ctx, request{op: fmt.Sprintf("abort build %d", id), method: http.MethodPut, path: buildPath(id) + "/abort"}, nil)
}

// ResumeBuild asks for a build that resumes a failed job build from its
// failed step, Porter's own route: POST /api/v1/builds/{id}/resume.
func (c *Client) ResumeBuild(ctx context.Context, id int64) (concourse.Build, error) {
	var b concourse.Build
	err := c.do(ctx, request{op: fmt.Sprintf("resume build %d", id), method: http.MethodPost, path: buildPath(id) + "/resume"}, &b)
	return b, err
}

// BuildArtifacts lists the artifacts a build kept (its artifact_output
// steps): GET /api/v1/builds/{id}/artifacts.
func (c *Client) BuildArtifacts(ctx context.Context, id int64) ([]concourse.WorkerArtifact, error) {
	var as []concourse.WorkerArtifact
	err := c.do(ctx, request{op: fmt.Sprintf("list artifacts of build %d", id), method: http.MethodGet, path: buildPath(id) + "/artifacts"}, &as)
	return as, err
}

// Audit reads a build's audit trail, Porter's own route:
// GET /api/v1/builds/{id}/audit.
func (c *Client) Audit(ctx context.Context, id int64) (api.Audit, error) {
	var a api.Audit
	err := c.do(ctx, request{op: fmt.Sprintf("read the audit trail of build %d", id), method: http.MethodGet, path: buildPath(id) + "/audit"}, &a)
	return a, err
}

// ContainerFilter selects a team's containers as fly's intercept does;
// empty fields are not part of the query.
type ContainerFilter struct {
	BuildID  int64
	StepName string
	// Type is the step type (task, get, put, check).
	Type    string
	Attempt string
}

func (f ContainerFilter) query() url.Values {
	q := url.Values{}
	if f.BuildID != 0 {
		q.Set("build_id", strconv.FormatInt(f.BuildID, 10))
	}
	for k, v := range map[string]string{"step_name": f.StepName, "type": f.Type, "attempt": f.Attempt} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// Containers lists a team's containers (step pods) that match filter:
// GET /api/v1/teams/{team}/containers.
func (c *Client) Containers(ctx context.Context, team string, filter ContainerFilter) ([]concourse.Container, error) {
	var cs []concourse.Container
	err := c.do(ctx, request{op: "list containers", method: http.MethodGet, path: c.teamPath(team) + "/containers", query: filter.query()}, &cs)
	return cs, err
}

// HijackURL is the WebSocket URL of an intercept session into a
// container: ws(s)://.../api/v1/teams/{team}/containers/{handle}/hijack.
// Send it with AuthHeader.
func (c *Client) HijackURL(team, handle string) string {
	u := *c.base
	u.Scheme = "ws"
	if c.base.Scheme == "https" {
		u.Scheme = "wss"
	}
	return u.String() + c.teamPath(team) + "/containers/" + url.PathEscape(handle) + "/hijack"
}
