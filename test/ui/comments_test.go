package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// tabAs is a tab holding token, as the login page leaves it.
func tabAs(token string) context.Context {
	GinkgoHelper()
	ctx := tab()
	Expect(chromedp.Do(ctx,
		chromedp.Navigate(s.server.URL()+"/login"),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](fmt.Sprintf(`localStorage.setItem("porter.token", %q), true`, token))(ctx, t)
			return err
		}),
	)).To(Succeed())
	return ctx
}

// putComment is PUT /api/v1/builds/id/comment with token; it answers the
// status.
func putComment(ctx context.Context, token string, id int, body string) int {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("%s/api/v1/builds/%d/comment", s.server.URL(), id), strings.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	res.Body.Close()
	return res.StatusCode
}

var _ = Describe("build comments", func() {
	// Concourse's SetBuildComment: a member of the build's team writes it,
	// the page shows it as text (never as markup) in the build's header
	// and in the job's build list, and a viewer reads it with no editor
	// (and no trigger, rerun, abort, pause, check or pin: those are a
	// pipeline-operator's).
	It("lets a member comment on a build, shown as text in the header and the job's list, and a viewer only read it, offered no operator's action on any page", func(ctx SpecContext) {
		team, name := pipelineName("comments"), pipelineName("commented")
		const resourceName = "src"
		roles := writeFile("roles.yml", fmt.Sprintf("roles:\n- name: owner\n  local:\n    users: [%s]\n- name: member\n  oidc:\n    groups: [%s]\n- name: viewer\n  oidc:\n    users: [%s]\n",
			adminUser, ssoGroup, s.alice.UserName))
		succeed(ctx, s.adminFly, "set-team", "-n", team, "-c", roles, "--non-interactive")
		DeferCleanup(func(ctx SpecContext) { succeed(ctx, s.adminFly, "destroy-team", "-n", team, "--non-interactive") })
		succeed(ctx, s.adminFly, "set-pipeline", "-n", "--team", team, "-p", name, "-c", writeFile("p.yml", "resources:\n- name: "+resourceName+"\n  type: mock\n  source: {initial_version: v1}\njobs:\n- name: hello\n  plan:\n  - get: "+resourceName+"\n"+taskStep("t", "echo hello")))
		succeed(ctx, s.adminFly, "unpause-pipeline", "--team", team, "-p", name)
		succeed(ctx, s.adminFly, "trigger-job", "--team", team, "-j", name+"/hello")
		var builds []struct {
			ID int `json:"id"`
		}
		Eventually(func() int {
			apiGet(ctx, "/api/v1/teams/"+team+"/pipelines/"+name+"/jobs/hello/builds", &builds)
			return len(builds)
		}).Should(Equal(1))
		id := builds[0].ID

		member, refusedLogin := ssoLogin(ctx, s.ssoUser)
		Expect(refusedLogin).To(BeEmpty())
		Expect(userInfo(ctx, member).Teams).To(HaveKeyWithValue(team, []string{"member"}))
		viewer, refusedLogin := ssoLogin(ctx, s.alice)
		Expect(refusedLogin).To(BeEmpty())
		Expect(userInfo(ctx, viewer).Teams).To(HaveKeyWithValue(team, []string{"viewer"}))

		buildPage := "/teams/" + team + "/pipelines/" + name + "/jobs/hello/builds/1"
		c := tabAs(member)
		open(c, buildPage, `[data-testid=edit-comment]`)
		// Written once the build has ended: the page reads the build again
		// then, and the comment must outlive that too.
		Eventually(evalEventually[string](c, `document.querySelector('[data-testid=build-head]')?.dataset.status`)).
			WithTimeout(2 * time.Minute).Should(Equal("succeeded"))
		const comment = "flaky: <b>not bold</b> & <img src=x onerror=alert(1)>"
		Expect(chromedp.Do(c,
			chromedp.Click(chromedp.CSS(`[data-testid=edit-comment]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=comment-input]`)),
			chromedp.SendKeys(chromedp.CSS(`[data-testid=comment-input]`), comment),
			chromedp.Click(chromedp.CSS(`[data-testid=save-comment]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=build-comment]`)),
		)).To(Succeed())
		var got struct {
			Comment string `json:"comment"`
		}
		apiGet(ctx, fmt.Sprintf("/api/v1/builds/%d", id), &got)
		Expect(got.Comment).To(Equal(comment))

		// After a reload, from the server: text, no element made of it.
		open(c, buildPage, `[data-testid=build-comment]`)
		Expect(eval[string](c, `document.querySelector('[data-testid=build-comment]').textContent`)).To(Equal(comment))
		Expect(eval[int](c, `document.querySelectorAll('[data-testid=build-comment] *').length`)).To(Equal(0))
		// The editor's button comes once the page knows who the user is.
		Expect(chromedp.Do(c, chromedp.WaitVisible(chromedp.CSS(`[data-testid=edit-comment]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=build-end]`)))).To(Succeed())
		screenshot(c, "member's build header")
		// A member operates the job: rerun and trigger are offered.
		Eventually(evalEventually[bool](c, `!!document.querySelector('[data-testid=rerun-build]') && !!document.querySelector('[data-testid=trigger-build]')`)).Should(BeTrue())

		open(c, "/teams/"+team+"/pipelines/"+name+"/jobs/hello", `[data-build="1"] [data-testid=build-comment-cell]`)
		Expect(eval[string](c, `document.querySelector('[data-build="1"] [data-testid=build-comment-cell]').textContent`)).To(Equal(comment))
		Expect(eval[int](c, `document.querySelectorAll('[data-build="1"] [data-testid=build-comment-cell] *').length`)).To(Equal(0))
		screenshot(c, "job's build list")

		// The viewer reads it; the page offers no editor (once it knows
		// who the user is), and the server refuses one anyway.
		v := tabAs(viewer)
		open(v, buildPage, `[data-testid=build-comment]`)
		Expect(eval[string](v, `document.querySelector('[data-testid=build-comment]').textContent`)).To(Equal(comment))
		Expect(chromedp.Do(v, chromedp.WaitVisible(chromedp.CSS(`[data-testid=user-menu]`)))).To(Succeed())
		Expect(eval[string](v, `document.querySelector('[data-testid=user-menu]').textContent`)).To(Equal(s.alice.UserName))
		// Nor, as Concourse's roles say, anything a pipeline-operator does:
		// not on the build, the job, the resource or the pipeline page.
		Consistently(evalEventually[bool](v, `!!document.querySelector('[data-testid=edit-comment], [data-testid=rerun-build], [data-testid=trigger-build], [data-testid=resume], [data-testid=abort]')`)).
			WithTimeout(time.Second).Should(BeFalse())
		screenshot(v, "viewer's build header")
		operatorOnly := `!!document.querySelector('[data-testid=trigger], [data-testid=pause-job], [data-testid=check], [data-testid=pin], [data-testid=toggle-version], [data-testid=pin-comment], [data-testid=pause-pipeline]')`
		for _, page := range []string{"/jobs/hello", "/resources/" + resourceName, ""} {
			open(v, "/teams/"+team+"/pipelines/"+name+page, `[data-testid=user-menu]`)
			Consistently(evalEventually[bool](v, operatorOnly)).WithTimeout(time.Second).Should(BeFalse(), page)
		}
		// The member is offered them (the same page, once it knows who).
		open(c, "/teams/"+team+"/pipelines/"+name+"/jobs/hello", `[data-testid=trigger]`)
		Expect(putComment(ctx, viewer, id, `{"comment":"mine"}`)).To(Equal(http.StatusForbidden))
		apiGet(ctx, fmt.Sprintf("/api/v1/builds/%d", id), &got)
		Expect(got.Comment).To(Equal(comment))
	}, SpecTimeout(specTimeout))
})
