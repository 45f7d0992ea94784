package e2e_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/worker"
	"github.com/porter-ci/porter/test/testenv"
)

const (
	atcRBACManifest       = "../../deploy/atc/rbac.yaml"
	atcServiceAccountName = "atc-porter-runtime"
	// rbacPropagation bounds how long the API server's authorizer takes to
	// see a new Role and RoleBinding.
	rbacPropagation = 30 * time.Second
)

// applyATCRBAC creates deploy/atc's ServiceAccount, Role and RoleBinding in
// ns, as `kubectl apply -k` would with the namespace set to ns.
func applyATCRBAC(ctx context.Context, ns string) {
	objs, err := testenv.DecodeManifests(atcRBACManifest)
	Expect(err).NotTo(HaveOccurred())
	Expect(objs).To(HaveLen(3), "rbac.yaml holds a ServiceAccount, a Role and a RoleBinding")
	Expect(testenv.ApplyATCRBAC(ctx, cluster.client, ns)).To(Succeed())
}

// access is one question to the authorizer about the ATC's account.
type access struct {
	namespace   string // "" for cluster-scoped or all namespaces
	verb        string
	group       string
	resource    string
	subresource string
}

// canI asks the API server whether the ATC's ServiceAccount in ns may do a.
func canI(ctx context.Context, ns string, a access) (bool, string) {
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + ns + ":" + atcServiceAccountName,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace:   a.namespace,
			Verb:        a.verb,
			Group:       a.group,
			Resource:    a.resource,
			Subresource: a.subresource,
		},
	}}
	res, err := cluster.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating a SubjectAccessReview")
	return res.Status.Allowed, res.Status.Reason
}

var _ = Describe("the ATC's RBAC (deploy/atc)", func() {
	var ns string

	BeforeEach(func(ctx SpecContext) {
		ns = specNamespace(ctx, "atc-rbac-")
		applyATCRBAC(ctx, ns)
	}, NodeTimeout(60*time.Second))

	It("grants the ATC the rights the runtime uses and nothing else, in its namespace or outside it", func(ctx SpecContext) {
		// Everything the runtime uses is allowed (the authorizer learns of a
		// new binding within moments).
		want := runtimeRights()
		for _, r := range want {
			a := access{namespace: ns, verb: r.verb, group: r.group, resource: r.resource, subresource: r.subresource}
			Eventually(func() bool {
				ok, _ := canI(ctx, ns, a)
				return ok
			}).WithContext(ctx).WithTimeout(rbacPropagation).Should(BeTrue(), "the ATC should be allowed %+v", a)
		}

		// Nothing else is: every rule the API server grants the ATC's
		// account in the namespace, less what it grants any account there
		// (the namespace's default ServiceAccount: discovery, self reviews),
		// is exactly the runtime's list.
		granted := grantedRules(ctx, ns, atcServiceAccountName)
		anyone := grantedRules(ctx, ns, "default")
		var extra []right
		for r := range granted {
			if !anyone[r] {
				extra = append(extra, r)
			}
		}
		Expect(extra).To(ConsistOf(want), "the ATC's rights in its namespace beyond any account's")

		// Outside the namespace and cluster-wide: nothing.
		denied := []access{
			{namespace: "default", verb: "create", resource: "pods"},
			{namespace: "default", verb: "get", resource: "secrets"},
			{namespace: "kube-system", verb: "get", resource: "secrets"},
			{namespace: "", verb: "list", resource: "pods"},
			{namespace: "", verb: "watch", resource: "pods"},
			{namespace: "", verb: "get", resource: "secrets"},
			{verb: "list", resource: "nodes"},
			{verb: "get", resource: "nodes"},
			{verb: "create", resource: "namespaces"},
			{verb: "delete", resource: "namespaces"},
			{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterroles"},
			{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
			{verb: "create", resource: "persistentvolumes"},
			{verb: "create", group: "certificates.k8s.io", resource: "certificatesigningrequests"},
		}
		for _, a := range denied {
			ok, reason := canI(ctx, ns, a)
			Expect(ok).To(BeFalse(), "the ATC must not be allowed %+v (%s)", a, reason)
		}
	}, SpecTimeout(2*time.Minute))

	It("lets the ATC's own token create and watch a step pod, and forbids pods/exec and pods/attach", func(ctx SpecContext) {
		saConfig, err := testenv.ServiceAccountKubeconfig(ctx, cluster.admin, ns, atcServiceAccountName)
		Expect(err).NotTo(HaveOccurred())
		sa, err := kubernetes.NewForConfig(saConfig)
		Expect(err).NotTo(HaveOccurred())

		// Wait until the binding is in force for this identity.
		Eventually(func() error {
			_, err := sa.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: podspec.WorkerSelector(e2eWorker)})
			return err
		}).WithContext(ctx).WithTimeout(rbacPropagation).Should(Succeed())

		// The Secret and its owner patch, as the ATC does for every step.
		pod := stepPod(ns, "as-atc", "echo hello from the ATC pod")
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Labels: pod.Labels}}
		_, err = sa.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred(), "the ATC creating a step Secret")

		w := startWatcher(ctx, sa, ns)
		tr := w.Track("as-atc")
		DeferCleanup(tr.Stop)
		created, err := sa.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred(), "the ATC creating a step pod")
		patch, err := podspec.OwnerPatch(created)
		Expect(err).NotTo(HaveOccurred())
		_, err = sa.CoreV1().Secrets(ns).Patch(ctx, secret.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred(), "the ATC tying the Secret to its pod")

		end := expectEnd(ctx, ns, tr)
		Expect(end.Phase).To(Equal(corev1.PodSucceeded))
		Expect(tr.Failed()).NotTo(Receive())
		logs, err := cluster.client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: podspec.StepContainerName}).DoRaw(ctx)
		Expect(err).NotTo(HaveOccurred(), "reading the step's logs as the admin")
		Expect(string(logs)).To(ContainSubstring("hello from the ATC pod"))
		// The runtime never reads a pod's log (the sidecar streams the output).
		_, err = sa.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: podspec.StepContainerName}).DoRaw(ctx)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "pods/log as the ATC: want Forbidden, got %v", err)

		// Reaching into the pod is refused before anything else is looked at.
		for _, sub := range []string{"exec", "attach"} {
			err = sa.CoreV1().RESTClient().Post().
				Namespace(ns).Resource("pods").Name(pod.Name).SubResource(sub).
				Param("container", podspec.StepContainerName).Param("command", "true").Param("stdout", "true").
				Do(ctx).Error()
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "pods/%s as the ATC: want Forbidden, got %v", sub, err)
		}
		_, err = sa.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing pods in another namespace: want Forbidden, got %v", err)
		_, err = sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing nodes: want Forbidden, got %v", err)

		Expect(sa.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})).To(Succeed(), "the ATC deleting its pod")
	}, SpecTimeout(3*time.Minute))

})

// right is one verb on one resource (and subresource) of one API group.
type right struct{ verb, group, resource, subresource string }

// runtimeRights is what the runtime uses: pkg/worker.Required (its rights in
// a worker's namespace, which it checks at start), plus reading Secrets for
// its own keys (token signing key, step-token key, CA), which in-cluster
// live in its namespace, the one this Role covers (pkg/auth
// LoadOrCreateKeySecret, pkg/atc/tls.go).
func runtimeRights() []right {
	var out []right
	for _, a := range append(worker.Required(), worker.Optional()...) {
		out = append(out, right{verb: a.Verb, resource: a.Resource, subresource: a.Subresource})
	}
	return append(out, right{verb: "get", resource: "secrets"})
}

// expand lists a rule's rights one by one ("pods/log" is resource pods,
// subresource log).
func expand(groups, resources, verbs []string) []right {
	var out []right
	for _, g := range groups {
		for _, res := range resources {
			r, sub, _ := strings.Cut(res, "/")
			for _, v := range verbs {
				out = append(out, right{verb: v, group: g, resource: r, subresource: sub})
			}
		}
	}
	return out
}

// grantedRules is every resource right the API server grants service
// account sa in ns, as the account itself sees them (SelfSubjectRulesReview
// with its own token). A wildcard stays "*", so it can never match a list.
func grantedRules(ctx context.Context, ns, sa string) map[right]bool {
	GinkgoHelper()
	cfg, err := testenv.ServiceAccountKubeconfig(ctx, cluster.admin, ns, sa)
	Expect(err).NotTo(HaveOccurred())
	client, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	review, err := client.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx,
		&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "a SelfSubjectRulesReview as %s/%s", ns, sa)
	Expect(review.Status.Incomplete).To(BeFalse(), "the rules of %s/%s are incomplete: %s", ns, sa, review.Status.EvaluationError)
	out := map[right]bool{}
	for _, rule := range review.Status.ResourceRules {
		for _, r := range expand(rule.APIGroups, rule.Resources, rule.Verbs) {
			out[r] = true
		}
	}
	return out
}

var _ = Describe("deploy/atc/rbac.yaml", func() {
	It("grants exactly the rights the runtime uses (pkg/worker.Required and reading its key Secrets)", func() {
		objs, err := testenv.DecodeManifests(atcRBACManifest)
		Expect(err).NotTo(HaveOccurred())
		var role *rbacv1.Role
		for _, obj := range objs {
			if r, ok := obj.(*rbacv1.Role); ok {
				role = r
			}
		}
		Expect(role).NotTo(BeNil())
		var granted []right
		for _, rule := range role.Rules {
			Expect(rule.ResourceNames).To(BeEmpty(), "a rule of the Role")
			granted = append(granted, expand(rule.APIGroups, rule.Resources, rule.Verbs)...)
		}
		Expect(granted).To(ConsistOf(runtimeRights()))
	})
})
