package fly_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

// Ordered: set-team creates team other, which the later specs use.
var _ = Describe("teams", Ordered, func() {
	var alice *testenv.Fly
	BeforeAll(func() {
		// Here, so its HOME lasts as long as the container.
		alice = newFly("other")
	})

	It("lists the teams (teams)", func(ctx SpecContext) {
		res := succeed(ctx, s.adminFly, "teams")
		Expect(strings.Fields(res.Stdout)).To(ContainElement("main"), res.String())

		res = succeed(ctx, s.adminFly, "teams", "--details")
		Expect(plain(res.Stdout)).To(MatchRegexp(`(?m)^main/owner\s+local:admin\s+none\s*$`), res.String())
	})

	It("creates and updates a team as an admin (set-team)", func(ctx SpecContext) {
		res := succeed(ctx, s.adminFly, "set-team", "-n", "other", "--local-user", aliceUser, "--non-interactive")
		out := plain(res.Stdout)
		Expect(out).To(ContainSubstring("setting team: other"))
		Expect(out).To(ContainSubstring("role owner:"))
		Expect(out).To(ContainSubstring("- local:alice"))
		Expect(out).To(HaveSuffix("team created\n"), res.String())

		res = succeed(ctx, s.adminFly, "set-team", "-n", "other", "--local-user", aliceUser, "--non-interactive")
		Expect(res.Stdout).To(HaveSuffix("team updated\n"), res.String())

		// Other specs on the shared server add teams of their own.
		res = succeed(ctx, s.adminFly, "teams")
		Expect(strings.Fields(res.Stdout)).To(ContainElements("main", "other"), res.String())
	})

	It("lets a member of other log in to other, and only there", func(ctx SpecContext) {
		res := login(ctx, alice, s.server, aliceUser, s.alicePassword, "-n", "other")
		Expect(res.Stdout).To(ContainSubstring("logging in to team 'other'"))

		// The pipelines specs make alice a member of a team of theirs too.
		res = succeed(ctx, alice, "userinfo")
		Expect(strings.Fields(res.Stdout)).To(HaveExactElements(aliceUser, ContainSubstring("other/owner")), res.String())
		res = succeed(ctx, alice, "teams")
		Expect(strings.Fields(res.Stdout)).To(ContainElement("other"), res.String())
		Expect(strings.Fields(res.Stdout)).NotTo(ContainElement("main"), res.String())

		f := newFly("main")
		res, err := f.Login(ctx, s.server.URL(), aliceUser, s.alicePassword, "-n", "main")
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("you are not a member of 'main' or the team does not exist"), res.String())
	})

	It("refuses set-team to a user who is not an admin", func(ctx SpecContext) {
		res := run(ctx, alice, "set-team", "-n", "third", "--local-user", aliceUser, "--non-interactive")
		Expect(res.ExitCode).To(Equal(1), res.String())
		Expect(res.Stderr).To(ContainSubstring("forbidden"), res.String())
		Expect(strings.Fields(succeed(ctx, s.adminFly, "teams").Stdout)).NotTo(ContainElement("third"))
	})

	It("runs a member's builds in their own team", func(ctx SpecContext) {
		res := succeed(ctx, alice, "execute", "-c", shTask("echo in-other"))
		Expect(res.Stdout).To(ContainSubstring("in-other"))
		b := getBuild(ctx, s.server, s.adminToken, buildID(res.Stdout))
		Expect(b.TeamName).To(Equal("other"))

		// alice's builds list has only other's builds.
		res = succeed(ctx, alice, "builds", "--json")
		var builds []apiBuild
		Expect(json.Unmarshal([]byte(res.Stdout), &builds)).To(Succeed(), res.String())
		Expect(builds).NotTo(BeEmpty())
		for _, b := range builds {
			Expect(b.TeamName).To(Equal("other"), res.String())
		}
	})

	Context("a build of team main, to a member of other only", func() {
		var (
			id         int
			aliceToken string
		)
		BeforeAll(func(ctx SpecContext) {
			id = startBuild(ctx, s.adminFly, "echo secret-of-main; sleep 600")
			DeferCleanup(func(ctx context.Context) {
				run(ctx, s.adminFly, "abort-build", "-b", strconv.Itoa(id))
			})
			var err error
			aliceToken, err = s.server.Login(ctx, aliceUser, s.alicePassword)
			Expect(err).NotTo(HaveOccurred())
			// Running, so there is something to watch, abort and intercept.
			Eventually(func() []flyContainer { return containersOf(ctx, id) }).
				WithTimeout(time.Minute).Should(HaveLen(1))
		})

		It("is forbidden to watch", func(ctx SpecContext) {
			res := run(ctx, alice, "watch", "-b", strconv.Itoa(id))
			Expect(res.ExitCode).To(Equal(1), res.String())
			Expect(res.Stderr).To(ContainSubstring("forbidden"), res.String())
			Expect(res.Stdout).NotTo(ContainSubstring("secret-of-main"))

			code, body := call(ctx, http.MethodGet, s.server.URL()+"/api/v1/builds/"+strconv.Itoa(id)+"/events", aliceToken, nil, nil)
			Expect(code).To(Equal(http.StatusForbidden), body)
		})

		It("is forbidden to abort", func(ctx SpecContext) {
			res := run(ctx, alice, "abort-build", "-b", strconv.Itoa(id))
			Expect(res.ExitCode).To(Equal(1), res.String())
			Expect(res.Stderr).To(ContainSubstring("forbidden"), res.String())

			code, body := call(ctx, http.MethodPut, s.server.URL()+"/api/v1/builds/"+strconv.Itoa(id)+"/abort", aliceToken, nil, nil)
			Expect(code).To(Equal(http.StatusForbidden), body)
			Expect(buildStatus(ctx, id)).To(Equal("started"))
		})

		It("is forbidden to intercept", func(ctx SpecContext) {
			// As in Concourse, other's containers do not include main's.
			res := run(ctx, alice, "intercept", "-b", strconv.Itoa(id), "-s", "one-off", "--", "echo", "got-in")
			Expect(res.ExitCode).To(Equal(1), res.String())
			Expect(res.Stderr).To(ContainSubstring("no containers matched your search parameters"), res.String())
			Expect(res.Stdout).NotTo(ContainSubstring("got-in"))

			// Every container route of main's is refused, by handle too.
			handle := containerOf(ctx, id)
			for _, path := range []string{
				"/api/v1/teams/main/containers?build_id=" + strconv.Itoa(id),
				"/api/v1/teams/main/containers/" + handle,
				"/api/v1/teams/main/containers/" + handle + "/hijack",
			} {
				code, body := call(ctx, http.MethodGet, s.server.URL()+path, aliceToken, nil, nil)
				Expect(code).To(Equal(http.StatusForbidden), "%s: %s", path, body)
			}
		})

		It("is refused when the member asks in team main (--team)", func(ctx SpecContext) {
			for _, cmd := range [][]string{
				{"intercept", "--team", "main", "-b", strconv.Itoa(id), "-s", "one-off", "--", "echo", "got-in"},
				{"watch", "--team", "main", "-b", strconv.Itoa(id)},
			} {
				res := run(ctx, alice, cmd...)
				Expect(res.ExitCode).To(Equal(1), res.String())
				Expect(res.Stderr).To(ContainSubstring("you do not have a role on team 'main'"), res.String())
				Expect(res.Stdout).NotTo(ContainSubstring("got-in"))
			}
		})
	})
})

// containerOf is the handle of a build's only container (admin's view).
func containerOf(ctx context.Context, id int) string {
	GinkgoHelper()
	cs := containersOf(ctx, id)
	Expect(cs).To(HaveLen(1))
	return cs[0].ID
}
