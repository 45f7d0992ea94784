package runtime_test

import (
	"context"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/podspec"
	pworker "github.com/porter-ci/porter/pkg/worker"
	"github.com/porter-ci/porter/test/testenv"
)

// A worker with team_namespaces: team main's steps run in a namespace of
// their own, which the server creates as it registers the worker. That
// another team's steps cannot reach them there is the NetworkPolicy's work,
// proven without a policy-enforcing CNI by test/netpol and pkg/worker.
var _ = Describe("team namespaces", Ordered, func() {
	var (
		env            *testenv.ATCEnv
		shared, teamNS string
	)
	BeforeAll(func(ctx SpecContext) {
		var err error
		env, err = testenv.NewATCEnv(ctx, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		ns, removeNS, err := env.NewWorkerNamespace(ctx, "porter-teamns-")
		DeferCleanup(removeNS)
		Expect(err).NotTo(HaveOccurred())
		shared, teamNS = ns.Name, ns.Name+"-main"
		removeRBAC, err := testenv.ApplyTeamNamespacesRBAC(ctx, env.Admin, ns.Name)
		DeferCleanup(removeRBAC)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			err := env.Admin.CoreV1().Namespaces().Delete(ctx, teamNS, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				Fail("delete team namespace " + teamNS + ": " + err.Error())
			}
		})
		dsn, dropDB, err := env.NewDatabase(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(dropDB)

		own, err := env.NewATC(testenv.ATCConfig{
			Worker: ns, Database: dsn, Bucket: ns.Name,
			LocalUsers: []string{user + ":" + password}, MainTeamUsers: []string{user},
			TeamNamespaces: map[string]string{"main": teamNS},
			Args:           resourceTypeArgs(ctx),
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(own.Start(ctx)).To(Succeed())
		DeferCleanup(func(context.Context) {
			Expect(own.Stop()).To(Succeed())
			GinkgoWriter.Printf("team namespaces server log:\n%s\n", own.Log())
		})
		suiteServer, suiteNamespace := server, namespace
		server, namespace = own, ns.Name
		DeferCleanup(func() { server, namespace = suiteServer, suiteNamespace })
		res := porter(ctx, "login", "-c", server.URL(), "-u", user, "-p", password)
		Expect(res.Code).To(Equal(0), res.String())
	})

	It("runs team main's steps in main's own namespace, made with Pod Security labels, the ATC's rights and the isolation policy", func(ctx SpecContext) {
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+`run: {path: echo, args: [isolated]}
`))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(taskOutput(res.Stdout)).To(Equal("isolated\n"))
		id := strconv.FormatInt(buildID(res.Stdout), 10)

		own, err := env.Admin.CoreV1().Pods(teamNS).List(ctx, metav1.ListOptions{
			LabelSelector: podspec.BuildSelector(pworker.TeamNamespaceWorker(worker(), "main"), id)})
		Expect(err).NotTo(HaveOccurred())
		Expect(own.Items).To(HaveLen(1), "the step's pod in %s", teamNS)
		elsewhere, err := env.Admin.CoreV1().Pods(shared).List(ctx, metav1.ListOptions{LabelSelector: podspec.LabelBuild + "=" + id})
		Expect(err).NotTo(HaveOccurred())
		Expect(elsewhere.Items).To(BeEmpty(), "no pod of team main's build in the worker's shared namespace")

		ns, err := env.Admin.CoreV1().Namespaces().Get(ctx, teamNS, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(ns.Labels).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", "baseline"))
		Expect(ns.Labels).To(HaveKeyWithValue(pworker.LabelStepNamespace, "true"))
		Expect(ns.Labels).To(HaveKeyWithValue(podspec.LabelTeam, "main"))
		binding, err := env.Admin.RbacV1().RoleBindings(teamNS).Get(ctx, pworker.StepRoleName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(binding.Subjects).To(HaveLen(1))
		Expect(binding.Subjects[0].Kind).To(Equal("ServiceAccount"))
		Expect(binding.Subjects[0].Namespace).To(Equal(shared))
		_, err = env.Admin.NetworkingV1().NetworkPolicies(teamNS).Get(ctx, pworker.TeamIsolationPolicy, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
	})
})
