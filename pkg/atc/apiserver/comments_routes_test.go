package apiserver

import (
	"net/http"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
)

// Builds' comments (commentserver, and the build JSON's "comment").

func TestSetBuildComment(t *testing.T) {
	a := newTestAPI(t)
	member := a.roleIn(t, "member")
	const comment = "flaky: <b>not bold</b>\nsee #123"
	body := `{"comment":"flaky: <b>not bold</b>\nsee #123"}`
	if ans := a.do(t, "PUT", "/api/v1/builds/2/comment", member, body); ans.code != http.StatusOK || ans.body != "" {
		t.Fatalf("member sets the comment: %d %s, want 200 and no body", ans.code, ans)
	}
	if b := decode[concourse.Build](t, a.do(t, "GET", "/api/v1/builds/2", a.roleIn(t, "viewer"), ""), 200); b.Comment != comment {
		t.Errorf("GET build 2: comment %q, want %q", b.Comment, comment)
	}
	jobBuilds := decode[[]concourse.Build](t, a.do(t, "GET", "/api/v1/teams/main/pipelines/p/jobs/j/builds", member, ""), 200)
	if len(jobBuilds) == 0 || jobBuilds[0].ID != 2 || jobBuilds[0].Comment != comment {
		t.Errorf("job j's builds: %+v, want build 2 with its comment", jobBuilds)
	}
	if b := decode[concourse.Build](t, a.do(t, "GET", "/api/v1/teams/main/pipelines/p/jobs/j/builds/1", member, ""), 200); b.Comment != comment {
		t.Errorf("GET job j's build 1: comment %q, want %q", b.Comment, comment)
	}
	// An empty comment removes it; the JSON then has no "comment", as Concourse's.
	if ans := a.do(t, "PUT", "/api/v1/builds/2/comment", member, `{"comment":""}`); ans.code != http.StatusOK {
		t.Fatalf("clear: %d %s", ans.code, ans)
	}
	if ans := a.do(t, "GET", "/api/v1/builds/2", member, ""); strings.Contains(ans.body, `"comment"`) {
		t.Errorf("cleared comment still in %s", ans.body)
	}

	// Who may: Concourse's rule, pipeline-operator or above in the build's team.
	wantText(t, a.do(t, "PUT", "/api/v1/builds/2/comment", a.roleIn(t, "viewer"), body), 403, "build 2 belongs to a team you are not allowed to SetBuildComment in")
	ans := a.do(t, "PUT", "/api/v1/builds/2/comment", a.token(t, "o", map[string]string{"other": "owner"}), body)
	wantText(t, ans, 403, "build 2 belongs to a team you are not allowed to")
	if strings.Contains(ans.body, "main") {
		t.Errorf("the 403 names the build's team: %s", ans.body)
	}
	wantText(t, a.do(t, "PUT", "/api/v1/builds/2/comment", "", body), 401, "not authorized")
	want404(t, a.do(t, "PUT", "/api/v1/builds/99/comment", a.roleIn(t, "admin"), body), "Not Found", "build 99: not found")
	wantError(t, a.do(t, "PUT", "/api/v1/builds/x/comment", member, body), 400, "build id must be a positive number")

	for _, c := range []struct{ body, want string }{
		{``, "decode the build comment"},
		{`[`, "decode the build comment"},
		{`{"comment":7}`, "decode the build comment"},
		{`{}`, `the body must be {"comment": "text"}`},
		{`{"comment":null}`, `it has no "comment"`},
		{`{"comment":"a\u0000b"}`, "NUL character"},
		{`{"comment":"` + strings.Repeat("x", 10<<10+1) + `"}`, "the comment is 10241 bytes, over the 10240 bytes (10 KiB) a build's comment may hold"},
	} {
		wantError(t, a.do(t, "PUT", "/api/v1/builds/2/comment", member, c.body), 400, c.want)
	}
	// The largest comment fits, even written as JSON escapes.
	if ans := a.do(t, "PUT", "/api/v1/builds/2/comment", member, `{"comment":"`+strings.Repeat(`\u00e9`, 5<<10)+`"}`); ans.code != http.StatusOK {
		t.Errorf("10 KiB of escaped é: %d %s", ans.code, ans)
	}
	if n := strings.Count(strings.Join(a.store.calls, "\n"), "SetBuildComment 2"); n != 3 {
		t.Errorf("%d comments set, want 3: %v", n, a.store.calls)
	}
}

// TestBuildCommentVisibility: as in Concourse, the build's team sees its
// comment, anyone else only on a build of a job with `public: true`.
func TestBuildCommentVisibility(t *testing.T) {
	a := newTestAPI(t)
	withPublicBuilds(a)
	for _, id := range []int64{20, 21} {
		if err := a.store.SetBuildComment(t.Context(), id, "note"); err != nil {
			t.Fatal(err)
		}
	}
	stranger := a.token(t, "stranger", map[string]string{"other": "owner"})
	for _, c := range []struct {
		path, token string
		want        string
	}{
		{"/api/v1/builds/20", "", "note"},
		{"/api/v1/builds/20", stranger, "note"},
		{"/api/v1/builds/21", "", ""},
		{"/api/v1/builds/21", stranger, ""},
		{"/api/v1/builds/21", a.roleIn(t, "viewer"), "note"},
		{"/api/v1/teams/main/pipelines/pub/jobs/j/builds/1", "", "note"},
		{"/api/v1/teams/main/pipelines/pub/jobs/hidden/builds/1", "", ""},
		{"/api/v1/teams/main/pipelines/pub/jobs/hidden/builds/1", a.roleIn(t, "viewer"), "note"},
	} {
		if b := decode[concourse.Build](t, a.do(t, "GET", c.path, c.token, ""), 200); b.Comment != c.want {
			t.Errorf("GET %s (token %v): comment %q, want %q", c.path, c.token != "", b.Comment, c.want)
		}
	}
	for _, c := range []struct{ path, want string }{
		{"/api/v1/teams/main/pipelines/pub/jobs/j/builds", "note"},
		{"/api/v1/teams/main/pipelines/pub/jobs/hidden/builds", ""},
	} {
		bs := decode[[]concourse.Build](t, a.do(t, "GET", c.path, "", ""), 200)
		if len(bs) != 1 || bs[0].Comment != c.want {
			t.Errorf("anonymous GET %s: %+v, want one build with comment %q", c.path, bs, c.want)
		}
	}
}
