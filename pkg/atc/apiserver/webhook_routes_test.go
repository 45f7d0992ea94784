package apiserver

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// The resource check webhook (webhookserver): the seed resource r has
// webhook_token ((token)), which the fake engine fills in as "s3cret".

const whPath = rPath + "/check/webhook"

var webhookRoutes = []routeCase{
	// The token is the credential: anyone holding it may call.
	{method: "POST", path: whPath + "?webhook_token=s3cret", public: true, ok: 201, anonDown: 500},
}

func TestWebhookRoutesAccess(t *testing.T)    { checkAccess(t, webhookRoutes) }
func TestWebhookRoutesStoreDown(t *testing.T) { checkStoreDown(t, webhookRoutes) }

func TestCheckWebhookStartsACheck(t *testing.T) {
	a := newTestAPI(t)
	b := decode[concourse.Build](t, a.do(t, "POST", whPath+"?webhook_token=s3cret", "", ""), 201)
	if b.ID != 8 || b.ResourceName != "r" || b.Status != "started" || !a.store.changed("StartCheck 200") {
		t.Errorf("webhook: %+v, changes %v", b, a.store.calls)
	}
}

// TestCheckWebhookAnswers are Concourse's answers; none but 201 starts a
// check, and a wrong token says nothing of the right one.
func TestCheckWebhookAnswers(t *testing.T) {
	a := newTestAPI(t)
	wantError(t, a.do(t, "POST", whPath, "", ""), 400, "missing webhook_token query parameter")
	wantError(t, a.do(t, "POST", whPath+"?webhook_token=", "", ""), 400, "missing webhook_token query parameter")
	wantError(t, a.do(t, "POST", whPath+"?webhook_token=s3cret&vars=x", "", ""), 400, "instance vars")
	for _, tok := range []string{"wrong", "s3cre", "s3crett", "((token))", "S3CRET"} {
		ans := a.do(t, "POST", whPath+"?webhook_token="+tok, "", "")
		wantText(t, ans, http.StatusUnauthorized, "not authorized: wrong webhook_token")
	}
	want404(t, a.do(t, "POST", "/api/v1/teams/nope/pipelines/p/resources/r/check/webhook?webhook_token=s3cret", "", ""),
		"Team Not Found Error", "team 'nope' not found")
	want404(t, a.do(t, "POST", "/api/v1/teams/main/pipelines/ghost/resources/r/check/webhook?webhook_token=s3cret", "", ""),
		"Pipeline Not Found Error", "pipeline 'ghost' not found in team 'main'")
	want404(t, a.do(t, "POST", pPath+"/resources/ghost/check/webhook?webhook_token=s3cret", "", ""),
		"Resource Not Found Error", "Resource with name 'ghost' not found.")
	if a.store.changed("StartCheck 200") {
		t.Errorf("a refused webhook started a check: %v", a.store.calls)
	}

	// A resource without webhook_token takes no webhook, whatever is sent.
	a.store.resources[0].Config = json.RawMessage(`{"name":"r","type":"mock"}`)
	wantText(t, a.do(t, "POST", whPath+"?webhook_token=s3cret", "", ""), http.StatusUnauthorized, "wrong webhook_token")

	// An archived pipeline's resources are not checked (Concourse's 409),
	// said only to a caller holding the token.
	a = newTestAPI(t)
	a.store.pipelines[0].Archived = true
	wantText(t, a.do(t, "POST", whPath+"?webhook_token=wrong", "", ""), http.StatusUnauthorized, "wrong webhook_token")
	wantError(t, a.do(t, "POST", whPath+"?webhook_token=s3cret", "", ""), 409, "archived pipeline")

	// The credential manager failing is the server's problem, not a 401.
	a = newTestAPI(t)
	a.engine.fail = leakyDown
	ans := a.do(t, "POST", whPath+"?webhook_token=s3cret", "", "")
	checkNoLeak(t, ans)
	if ans.code != 500 {
		t.Errorf("credential manager failing: %d %s, want 500", ans.code, ans)
	}
}

func TestCheckWebhookOfAPipelineInstance(t *testing.T) {
	a := newTestAPI(t)
	a.store.resources = append(a.store.resources, db.Resource{ID: 201, PipelineID: 13, PipelineName: "p", TeamID: 1, TeamName: "main",
		Name: "r", Type: "mock", Active: true, Config: json.RawMessage(`{"name":"r","type":"mock","webhook_token":"branch-x"}`)})
	for _, q := range []string{`vars.branch="x"`, `vars={"branch":"x"}`} {
		b := decode[concourse.Build](t, a.do(t, "POST", whPath+"?webhook_token=branch-x&"+q, "", ""), 201)
		if b.ID != 8 || !a.store.changed("StartCheck 201") || a.store.changed("StartCheck 200") {
			t.Errorf("instance webhook (%s): %+v, changes %v", q, b, a.store.calls)
		}
	}
	// The other instance's token does not open this one.
	wantText(t, a.do(t, "POST", whPath+"?webhook_token=branch-x", "", ""), http.StatusUnauthorized, "wrong webhook_token")
	want404(t, a.do(t, "POST", whPath+`?webhook_token=branch-x&vars.branch="y"`, "", ""),
		"Pipeline Not Found Error", `pipeline 'p/branch:y' not found in team 'main'`)
}

// TestCheckWebhookQueuesBehindARunningCheck: while a check runs, a webhook
// queues one more (the push may be newer than what it sees) and answers
// the running build; no second check starts now.
func TestCheckWebhookQueuesBehindARunningCheck(t *testing.T) {
	a := newTestAPI(t)
	a.store.builds = append(a.store.builds, db.JobBuild{Build: db.Build{ID: 9, TeamID: 1, TeamName: "main", Name: "check", Status: "started"},
		PipelineID: 10, PipelineName: "p", ResourceID: 200, ResourceName: "r"})
	a.store.resources[0].LastCheckBuild = 9
	for range 3 {
		b := decode[concourse.Build](t, a.do(t, "POST", whPath+"?webhook_token=s3cret", "", ""), 201)
		if b.ID != 9 || b.Status != "started" {
			t.Errorf("webhook during a check: %+v", b)
		}
	}
	if a.store.changed("StartCheck 200") || !a.store.changed("RequestCheck 200") {
		t.Errorf("webhooks during a check: changes %v, want RequestCheck 200 only", a.store.calls)
	}
}
