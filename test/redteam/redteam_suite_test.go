// Package redteam_test replays attacks on Porter against the real server,
// the real fly, the local cluster and PostgreSQL: each spec is one attack
// that once got through (issue 28, "Nobody in where they don't belong", and
// the hardening before it), and proves what refuses it now.
package redteam_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

func TestRedTeam(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "red team")
}

var _ = ReportAfterSuite("spec times", testenv.RecordSpecTimes)

const (
	// admin owns the main team; member is a member of it, the attacker of
	// the specs that need a foothold in the team; outsider is the only
	// user of the team "other".
	admin, member, outsider = "red-admin", "red-member", "red-outsider"
	otherTeam               = "other"
	workerName              = "e2e-redteam"
)

var (
	env    *testenv.ATCEnv
	server *testenv.ATC
	// workerNS is the worker's namespace, where the step pods run.
	workerNS  string
	passwords = map[string]string{}
	// flyAs is a fly logged in as each user, each with its own home.
	flyAs = map[string]*testenv.Fly{}
)

var _ = BeforeSuite(func(ctx SpecContext) {
	flyBin, err := testenv.FindFly()
	skipIfUnavailable(err)
	env, err = testenv.NewATCEnv(ctx, GinkgoT().TempDir())
	skipIfUnavailable(err)
	// Another build of the server (an older main's, say) replays the
	// attacks against it: they should get through there.
	if bin := os.Getenv("PORTER_REDTEAM_ATC_BIN"); bin != "" {
		env.Bin = bin
	}
	ns, removeNS, err := env.NewWorkerNamespace(ctx, "porter-redteam-")
	DeferCleanup(removeNS)
	Expect(err).NotTo(HaveOccurred())
	workerNS = ns.Name
	dsn, drop, err := env.NewDatabase(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(drop)

	var users []string
	for _, u := range []string{admin, member, outsider} {
		passwords[u] = rand.Text()
		users = append(users, u+":"+passwords[u])
	}
	server, err = env.NewATC(testenv.ATCConfig{
		Worker: ns, WorkerName: workerName, Database: dsn,
		LocalUsers: users, MainTeamUsers: []string{admin},
		// Finished steps stay interceptible, as in the demo.
		KeepAlive: 10 * time.Minute,
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(server.Start(ctx)).To(Succeed())
	DeferCleanup(func() {
		Expect(server.Stop()).To(Succeed())
		GinkgoWriter.Printf("server log:\n%s\n", server.Log())
	})

	for _, u := range []string{admin, member, outsider} {
		f := testenv.NewFly(flyBin, GinkgoT().TempDir(), "redteam")
		f.Log = GinkgoWriter
		flyAs[u] = f
	}
	login(ctx, admin, "main")
	// The member: set-team -n main with roles needs a config file.
	rolesFile := writeFile(fmt.Sprintf("roles:\n- name: owner\n  local:\n    users: [%s]\n- name: member\n  local:\n    users: [%s]\n", admin, member))
	run(ctx, admin, "set-team", "-n", "main", "-c", rolesFile, "--non-interactive")
	run(ctx, admin, "set-team", "-n", otherTeam, "--local-user", outsider, "--non-interactive")
	login(ctx, member, "main")
	login(ctx, outsider, otherTeam)
})

func skipIfUnavailable(err error) {
	GinkgoHelper()
	if testenv.Unavailable(err) {
		if os.Getenv("CI") == "" {
			Skip(fmt.Sprintf("%v (run `make cluster-up`)", err))
		}
		Fail(fmt.Sprintf("CI needs the local cluster, PostgreSQL and fly: %v", err))
	}
	Expect(err).NotTo(HaveOccurred())
}

func login(ctx context.Context, user, team string) {
	GinkgoHelper()
	res, err := flyAs[user].Login(ctx, server.URL(), user, passwords[user], "-n", team)
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(0), res.String())
}

// run runs fly as user and expects it to succeed.
func run(ctx context.Context, user string, args ...string) testenv.FlyResult {
	GinkgoHelper()
	res, err := flyAs[user].Run(ctx, args...)
	Expect(err).NotTo(HaveOccurred())
	Expect(res.ExitCode).To(Equal(0), res.String())
	return res
}

func writeFile(content string) string {
	GinkgoHelper()
	f, err := os.CreateTemp(GinkgoT().TempDir(), "*.yml")
	Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteString(content)
	Expect(err).NotTo(HaveOccurred())
	Expect(f.Close()).To(Succeed())
	return f.Name()
}

// container is what `fly containers --json` says of one.
type container struct {
	ID           string `json:"id"`
	Type         string `json:"type"`
	StepName     string `json:"step_name"`
	PipelineName string `json:"pipeline_name"`
}

func containers(ctx context.Context, user string) []container {
	GinkgoHelper()
	var cs []container
	Expect(json.Unmarshal([]byte(run(ctx, user, "containers", "--json").Stdout), &cs)).To(Succeed())
	return cs
}

// rand8 is 8 random letters and digits, for names no other spec uses.
func rand8() string { return rand.Text()[:8] }
