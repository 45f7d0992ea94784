package apiserver

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
)

// Pipelines (pipelines.go).

const (
	pPath      = "/api/v1/teams/main/pipelines/p"
	validYAML  = "resources: [{name: r, type: mock, source: {}}]\njobs: [{name: j, plan: [{get: r}]}]\n"
	yamlHeader = "Content-Type"
)

var pipelineRoutes = []routeCase{
	{method: "GET", path: "/api/v1/pipelines", public: true, ok: 200, anonDown: 500},
	{method: "GET", path: "/api/v1/teams/main/pipelines", public: true, ok: 200, anonDown: 500},
	{method: "PUT", path: "/api/v1/teams/main/pipelines/ordering", role: "member", ok: 200, body: `["pub","p"]`},
	{method: "PUT", path: pPath + "/ordering", role: "member", ok: 200, body: `[{"branch":"x"}]`},
	{method: "GET", path: pPath, role: "viewer", ok: 200, anonDown: 500},
	{method: "DELETE", path: pPath, role: "member", ok: 204},
	{method: "GET", path: pPath + "/config", role: "viewer", ok: 200},
	{method: "PUT", path: pPath + "/config", role: "member", ok: 200, body: validYAML, hdr: []string{yamlHeader, "application/x-yaml"}},
	{method: "PUT", path: pPath + "/pause", role: "pipeline-operator", ok: 200},
	{method: "PUT", path: pPath + "/unpause", role: "pipeline-operator", ok: 200},
	{method: "PUT", path: pPath + "/expose", role: "member", ok: 200},
	{method: "PUT", path: pPath + "/hide", role: "member", ok: 200},
	{method: "PUT", path: pPath + "/rename", role: "member", ok: 200, body: `{"name":"q"}`},
}

func TestPipelineRoutesAccess(t *testing.T)    { checkAccess(t, pipelineRoutes) }
func TestPipelineRoutesStoreDown(t *testing.T) { checkStoreDown(t, pipelineRoutes) }

func pipelineNames(ps []concourse.Pipeline) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.TeamName+"/"+p.Name)
	}
	return out
}

func TestListPipelines(t *testing.T) {
	a := newTestAPI(t)
	viewer, other := a.roleIn(t, "viewer"), a.token(t, "o", map[string]string{"other": "owner"})
	for _, c := range []struct {
		path, token string
		want        []string
	}{
		{"/api/v1/pipelines", "", []string{"main/pub"}},
		{"/api/v1/pipelines", viewer, []string{"main/p", "main/pub", "main/p"}},
		{"/api/v1/pipelines", other, []string{"main/pub"}},
		{"/api/v1/pipelines", a.roleIn(t, "admin"), []string{"main/p", "main/pub", "main/p"}},
		{"/api/v1/teams/main/pipelines", "", []string{"main/pub"}},
		{"/api/v1/teams/main/pipelines", other, []string{"main/pub"}},
		{"/api/v1/teams/main/pipelines", viewer, []string{"main/p", "main/pub", "main/p"}},
		{"/api/v1/teams/other/pipelines", viewer, nil},
	} {
		ps := decode[[]concourse.Pipeline](t, a.do(t, "GET", c.path, c.token, ""), 200)
		if got := pipelineNames(ps); !slices.Equal(got, c.want) {
			t.Errorf("GET %s: %v, want %v", c.path, got, c.want)
		}
	}
}

func TestGetPipeline(t *testing.T) {
	a := newTestAPI(t)
	viewer := a.roleIn(t, "viewer")
	p := decode[concourse.Pipeline](t, a.do(t, "GET", pPath, viewer, ""), 200)
	if p.ID != 10 || p.Name != "p" || p.TeamName != "main" || p.Public || p.Paused {
		t.Errorf("pipeline %+v", p)
	}
	// An exposed pipeline is anyone's to read.
	if p := decode[concourse.Pipeline](t, a.do(t, "GET", "/api/v1/teams/main/pipelines/pub", "", ""), 200); p.ID != 11 || !p.Public {
		t.Errorf("public pipeline %+v", p)
	}
	// Whether a pipeline exists is told only to who may see the team.
	wantText(t, a.do(t, "GET", "/api/v1/teams/main/pipelines/ghost", "", ""), 401, "not authorized")
	wantText(t, a.do(t, "GET", "/api/v1/teams/main/pipelines/ghost", a.token(t, "o", map[string]string{"other": "owner"}), ""), 403,
		`you do not have a role on team "main"`)
	for _, sub := range []string{"", "/config", "/pause", "/unpause", "/expose", "/hide", "/rename"} {
		method, token := "PUT", a.roleIn(t, "admin")
		if sub == "" || sub == "/config" {
			method = "GET"
		}
		want404(t, a.do(t, method, "/api/v1/teams/main/pipelines/ghost"+sub, token, `{"name":"x"}`),
			"Pipeline Not Found Error", "pipeline 'ghost' not found in team 'main'")
		want404(t, a.do(t, method, pPath+sub+"?vars.branch=%22y%22", token, `{"name":"x"}`),
			"Pipeline Not Found Error", "pipeline 'p/branch:y' not found in team 'main'")
		wantError(t, a.do(t, method, pPath+sub+"?vars.branch=x", token, `{"name":"x"}`), 400,
			`instance vars: vars.branch="x" is not JSON`)
	}
	// An instance is found by its instance vars, whether fly sends them
	// whole (vars={...}) or one by one (vars.k=...).
	for _, q := range []string{"?vars=%7B%22branch%22%3A%22x%22%7D", "?vars.branch=%22x%22"} {
		if p := decode[concourse.Pipeline](t, a.do(t, "GET", pPath+q, viewer, ""), 200); p.ID != 13 || p.InstanceVars["branch"] != "x" {
			t.Errorf("instance %s: %+v", q, p)
		}
	}
	want404(t, a.do(t, "DELETE", "/api/v1/teams/main/pipelines/ghost", a.roleIn(t, "admin"), ""),
		"Pipeline Not Found Error", "pipeline 'ghost' not found in team 'main'")
}

func TestPipelineChanges(t *testing.T) {
	for _, c := range []struct {
		method, sub, body, role, change string
		code                            int
	}{
		{"PUT", "/pause", "", "pipeline-operator", "PausePipeline 10", 200},
		{"PUT", "/unpause", "", "pipeline-operator", "UnpausePipeline 10", 200},
		{"PUT", "/expose", "", "member", "ExposePipeline 10", 200},
		{"PUT", "/hide", "", "member", "HidePipeline 10", 200},
		{"PUT", "/rename", `{"name":"q"}`, "member", "RenamePipeline 10 q", 200},
		{"DELETE", "", "", "member", "DeletePipeline 10", 204},
	} {
		t.Run(c.method+c.sub, func(t *testing.T) {
			a := newTestAPI(t)
			if ans := a.do(t, c.method, pPath+c.sub, a.roleIn(t, c.role), c.body); ans.code != c.code {
				t.Errorf("%d %s, want %d", ans.code, ans, c.code)
			}
			if !a.store.changed(c.change) {
				t.Errorf("changes %v, want %q", a.store.calls, c.change)
			}
			// A viewer changes nothing.
			b := newTestAPI(t)
			wantText(t, b.do(t, c.method, pPath+c.sub, b.roleIn(t, "viewer"), c.body), 403, "you are not allowed to")
			if len(b.store.calls) != 0 {
				t.Errorf("a viewer changed %v", b.store.calls)
			}
		})
	}
}

func TestDeletePipeline(t *testing.T) {
	a := newTestAPI(t)
	prefix := taskCachePrefix(t, "main", "p")
	a.blobs.put(prefix+"j/t/cache", []byte("cache"))
	a.blobs.put(taskCachePrefix(t, "main", "pub")+"j/t/cache", []byte("cache"))
	if ans := a.do(t, "DELETE", pPath, a.roleIn(t, "member"), ""); ans.code != 204 {
		t.Fatalf("delete: %d %s", ans.code, ans)
	}
	// Its running build is aborted, its caches go.
	if !a.store.changed("AbortBuild 2") || !a.store.changed("DeletePipeline 10") {
		t.Errorf("changes %v", a.store.calls)
	}
	if a.blobs.has(prefix+"j/t/cache") || !a.blobs.has(taskCachePrefix(t, "main", "pub")+"j/t/cache") {
		t.Errorf("the task caches of the deleted pipeline are still there, or another's went")
	}
}

func TestRenamePipeline(t *testing.T) {
	a := newTestAPI(t)
	member := a.roleIn(t, "member")
	from, to := taskCachePrefix(t, "main", "p"), taskCachePrefix(t, "main", "q")
	a.blobs.put(from+"j/t/cache", []byte("cache"))
	got := decode[saveConfigResponse](t, a.do(t, "PUT", pPath+"/rename", member, `{"name":"q"}`), 200)
	if len(got.Errors)+len(got.Warnings) != 0 || !a.blobs.has(to+"j/t/cache") || a.blobs.has(from+"j/t/cache") {
		t.Errorf("rename answered %+v; caches moved: %v", got, a.blobs.has(to+"j/t/cache"))
	}
	got = decode[saveConfigResponse](t, a.do(t, "PUT", pPath+"/rename", member, `{"name":"Q"}`), 200)
	if len(got.Warnings) != 1 || got.Warnings[0].Type != "invalid_identifier" {
		t.Errorf("rename to Q: %+v, want an identifier warning", got)
	}
	for _, c := range []struct{ body, says string }{
		{`{"name":`, "decode the new name"},
		{`{"name":""}`, "pipeline: identifier cannot be an empty string"},
		{`{"name":"a b"}`, `"a b" is not a valid name`},
	} {
		got := decode[saveConfigResponse](t, a.do(t, "PUT", pPath+"/rename", member, c.body), 400)
		if len(got.Errors) != 1 || !strings.Contains(got.Errors[0], c.says) {
			t.Errorf("rename %s: %+v, want an error saying %q", c.body, got, c.says)
		}
	}
}

func TestGetConfig(t *testing.T) {
	a := newTestAPI(t)
	ans := a.do(t, "GET", pPath+"/config", a.roleIn(t, "viewer"), "")
	got := decode[struct {
		Config concourse.Config `json:"config"`
	}](t, ans, 200)
	if ans.header.Get("X-Concourse-Config-Version") != "3" || len(got.Config.Jobs) != 1 || got.Config.Jobs[0].Name != "j" {
		t.Errorf("config %+v, version %q", got, ans.header.Get("X-Concourse-Config-Version"))
	}
	// The config is the team's: not even an exposed pipeline's is public.
	wantText(t, a.do(t, "GET", "/api/v1/teams/main/pipelines/pub/config", "", ""), 401, "not authorized")
}

func TestSaveConfig(t *testing.T) {
	yaml := []string{yamlHeader, "application/x-yaml"}
	for _, c := range []struct {
		name, pipeline, query, body string
		hdr                         []string
		code                        int
		says                        string // in errors (400) or a warning
		saved                       string // the ref saved, if not the pipeline
	}{
		{name: "update", pipeline: "p", body: validYAML, hdr: yaml, code: 200},
		{name: "create", pipeline: "new", body: validYAML, hdr: yaml, code: 201},
		{name: "JSON", pipeline: "p", body: `{"resources":[{"name":"r","type":"mock","source":{}}],"jobs":[{"name":"j","plan":[{"get":"r"}]}]}`,
			hdr: []string{yamlHeader, "application/json"}, code: 200},
		{name: "name warning", pipeline: "New", body: validYAML, hdr: yaml, code: 201, says: "pipeline: 'New' is not a valid identifier"},
		{name: "since version", pipeline: "p", body: validYAML, hdr: append(yaml, "X-Concourse-Config-Version", "3"), code: 200},
		{name: "bad version", pipeline: "p", body: validYAML, hdr: append(yaml, "X-Concourse-Config-Version", "three"), code: 400,
			says: `config version is malformed: "three"`},
		{name: "check creds", pipeline: "p", query: "?check_creds", body: credsYAML("((token))", "((login.user))"), hdr: yaml, code: 200},
		{name: "check creds of an instance", pipeline: "p", query: "?check_creds&vars=%7B%22b%22%3A1%7D", body: credsYAML("((token))", "x"), hdr: yaml, code: 201, saved: "p/b:1"},
		{name: "check creds missing", pipeline: "p", query: "?check_creds", body: credsYAML("((nope))", "((login.name))"), hdr: yaml, code: 400,
			says: "credential validation failed\n\n2 errors occurred:\n\t* resource \"r\" source: undefined vars: nope\n\t* job \"j\" task \"t\" params: missing field 'name' in var: login.name\n\n"},
		{name: "check creds of another pipeline", pipeline: "q", query: "?check_creds", body: credsYAML("((token))", "x"), hdr: yaml, code: 400, says: "undefined vars: token"},
		{name: "unchecked creds", pipeline: "p", body: credsYAML("((nope))", "x"), hdr: yaml, code: 200},
		{name: "instance vars", pipeline: "p", query: "?vars=%7B%22branch%22%3A%22y%22%7D", body: validYAML, hdr: yaml, code: 201, saved: "p/branch:y"},
		{name: "bad instance vars", pipeline: "p", query: "?vars=%5B%5D", body: validYAML, hdr: yaml, code: 400, says: "is not a JSON object"},
		{name: "bad name", pipeline: "a%20b", body: validYAML, hdr: yaml, code: 400, says: `"a b" is not a valid name`},
		{name: "not YAML", pipeline: "p", body: "jobs: [:", hdr: yaml, code: 400, says: "malformed config"},
		{name: "unknown key", pipeline: "p", body: "resources: [{name: r, type: mock, source: {}}]\njobs: [{name: j, colour: blue, plan: [{get: r}]}]\n", hdr: yaml, code: 400, says: "colour"},
		{name: "invalid", pipeline: "p", body: "jobs: [{name: j, plan: [{get: nope}]}]\n", hdr: yaml, code: 400, says: "unknown resource 'nope'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newTestAPI(t)
			ans := a.do(t, "PUT", "/api/v1/teams/main/pipelines/"+c.pipeline+"/config"+c.query, a.roleIn(t, "member"), c.body, c.hdr...)
			got := decode[saveConfigResponse](t, ans, c.code)
			var said []string
			for _, w := range got.Warnings {
				said = append(said, w.Message)
			}
			said = append(said, got.Errors...)
			if c.says != "" && !strings.Contains(strings.Join(said, "\n"), c.says) {
				t.Errorf("answer %s does not say %q", ans, c.says)
			}
			ref := strings.ReplaceAll(c.pipeline, "%20", " ")
			if c.saved != "" {
				ref = c.saved
			}
			saved := a.store.changed("SavePipeline " + ref)
			if saved != (c.code < 300) {
				t.Errorf("saved: %v, want %v (%v)", saved, c.code < 300, a.store.calls)
			}
		})
	}
	a := newTestAPI(t)
	ans := a.do(t, "PUT", pPath+"/config", a.roleIn(t, "member"), validYAML, yamlHeader, "text/plain")
	wantError(t, ans, http.StatusUnsupportedMediaType, `content type "text/plain": send application/x-yaml or application/json`)
	want404(t, a.do(t, "PUT", "/api/v1/teams/nope/pipelines/p/config", a.roleIn(t, "admin"), validYAML, yamlHeader, "application/x-yaml"),
		"Not Found", `team "nope": not found`)
}

// credsYAML is a pipeline whose resource's source has token and whose task
// params have param.
func credsYAML(token, param string) string {
	return fmt.Sprintf("resources: [{name: r, type: mock, source: {token: %q}}]\n"+
		"jobs: [{name: j, plan: [{get: r}, {task: t, params: {P: %q}, config: {platform: linux, image_resource: {type: mock, source: {}}, run: {path: \"true\"}}}]}]\n", token, param)
}

func TestOrderPipelines(t *testing.T) {
	a := newTestAPI(t)
	member := a.roleIn(t, "member")
	if ans := a.do(t, "PUT", "/api/v1/teams/main/pipelines/ordering", member, `["pub","p"]`); ans.code != 200 || !a.store.changed("OrderPipelines") {
		t.Errorf("order: %d %s, changes %v", ans.code, ans, a.store.calls)
	}
	ans := a.do(t, "PUT", "/api/v1/teams/main/pipelines/ordering", member, `["ghost"]`)
	if ans.code != 400 || !strings.HasPrefix(ans.header.Get("Content-Type"), "text/plain") || !strings.Contains(ans.body, "not found") {
		t.Errorf("order an unknown pipeline: %d %s, want a 400 fly prints", ans.code, ans)
	}
	wantError(t, a.do(t, "PUT", "/api/v1/teams/main/pipelines/ordering", member, `{"p":1}`), 400, "decode the pipeline names")
	// fly order-instanced-pipelines: the instances of one pipeline.
	if ans := a.do(t, "PUT", pPath+"/ordering", member, `[{"branch":"x"},{}]`); ans.code != 200 || !a.store.changed("OrderPipelineInstances p") {
		t.Errorf("order instances: %d %s, changes %v", ans.code, ans, a.store.calls)
	}
	if ans := a.do(t, "PUT", "/api/v1/teams/main/pipelines/ghost/ordering", member, `[]`); ans.code != 400 || !strings.Contains(ans.body, "not found") {
		t.Errorf("order the instances of an unknown pipeline: %d %s", ans.code, ans)
	}
	wantError(t, a.do(t, "PUT", pPath+"/ordering", member, `["p"]`), 400, "decode the instance vars")
}

func taskCachePrefix(t testing.TB, segments ...string) string {
	t.Helper()
	p, err := blobstore.TaskCachePrefix(segments...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAnonymousCannotProbeTeams: an anonymous caller gets the same answer
// about a team that does not exist as about one that exists and exposes
// nothing (team other), so team names cannot be enumerated.
func TestAnonymousCannotProbeTeams(t *testing.T) {
	a := newTestAPI(t)
	for _, path := range []string{"/pipelines", "/pipelines/p", "/pipelines/p/jobs", "/pipelines/p/jobs/j",
		"/pipelines/p/resources", "/pipelines/p/resources/r", "/pipelines/p/config"} {
		existing := a.do(t, "GET", "/api/v1/teams/other"+path, "", "")
		missing := a.do(t, "GET", "/api/v1/teams/nope"+path, "", "")
		if normalized(existing) != normalized(missing) {
			t.Errorf("GET .../teams/{team}%s\nexisting team: %s\nmissing team:  %s\nwant the same answer", path, existing, missing)
		}
	}
}

// A config over the limit is 413 also when it comes chunked, with no
// length to refuse it by first (it answered 400), and nothing is saved.
func TestSaveConfigOversizeChunked(t *testing.T) {
	a := newTestAPI(t)
	for _, chunked := range []bool{false, true} {
		body := strings.Repeat("#", maxConfigSize+1)
		req := httptest.NewRequest("PUT", "http://porter.test"+pPath+"/config", io.MultiReader(strings.NewReader(body)))
		if chunked {
			req.ContentLength = -1
		} else {
			req.ContentLength = int64(len(body))
		}
		req.Header.Set("Authorization", "Bearer "+a.roleIn(t, "member"))
		req.Header.Set("Content-Type", "application/x-yaml")
		rec := httptest.NewRecorder()
		a.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "too large") {
			t.Errorf("chunked=%v: %d %s, want 413 saying too large", chunked, rec.Code, rec.Body)
		}
	}
	if len(a.store.calls) != 0 {
		t.Errorf("an oversize config changed %v", a.store.calls)
	}
}
