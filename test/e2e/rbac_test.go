package e2e_test

import (
	"context"
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

	It("grants exactly the Role's rights and nothing that reaches into a container or outside the namespace", func(ctx SpecContext) {
		allowed := []access{
			{namespace: ns, verb: "create", resource: "pods"},
			{namespace: ns, verb: "get", resource: "pods"},
			{namespace: ns, verb: "list", resource: "pods"},
			{namespace: ns, verb: "watch", resource: "pods"},
			{namespace: ns, verb: "delete", resource: "pods"},
			{namespace: ns, verb: "get", resource: "pods", subresource: "log"},
			{namespace: ns, verb: "create", resource: "secrets"},
			{namespace: ns, verb: "get", resource: "secrets"},
			{namespace: ns, verb: "patch", resource: "secrets"},
			{namespace: ns, verb: "delete", resource: "secrets"},
			{namespace: ns, verb: "get", resource: "events"},
			{namespace: ns, verb: "list", resource: "events"},
			{namespace: ns, verb: "watch", resource: "events"},
			// A Warning Event on the pod of a step that failed on its pod.
			{namespace: ns, verb: "create", resource: "events"},
		}
		denied := []access{
			// Into a container: the design never needs these.
			{namespace: ns, verb: "create", resource: "pods", subresource: "exec"},
			{namespace: ns, verb: "get", resource: "pods", subresource: "exec"},
			{namespace: ns, verb: "create", resource: "pods", subresource: "attach"},
			{namespace: ns, verb: "get", resource: "pods", subresource: "attach"},
			{namespace: ns, verb: "create", resource: "pods", subresource: "portforward"},
			{namespace: ns, verb: "create", resource: "pods", subresource: "ephemeralcontainers"},
			{namespace: ns, verb: "patch", resource: "pods", subresource: "ephemeralcontainers"},
			// Changing pods, reading secrets in bulk, changing events.
			{namespace: ns, verb: "update", resource: "pods"},
			{namespace: ns, verb: "patch", resource: "pods"},
			{namespace: ns, verb: "list", resource: "secrets"},
			{namespace: ns, verb: "watch", resource: "secrets"},
			{namespace: ns, verb: "update", resource: "events"},
			{namespace: ns, verb: "delete", resource: "events"},
			{namespace: ns, verb: "create", resource: "serviceaccounts", subresource: "token"},
			{namespace: ns, verb: "create", group: "rbac.authorization.k8s.io", resource: "roles"},
			{namespace: ns, verb: "create", group: "rbac.authorization.k8s.io", resource: "rolebindings"},
			{namespace: ns, verb: "create", group: "apps", resource: "deployments"},
			// Other namespaces and all of them at once.
			{namespace: "default", verb: "create", resource: "pods"},
			{namespace: "kube-system", verb: "get", resource: "secrets"},
			{namespace: "", verb: "list", resource: "pods"},
			{namespace: "", verb: "watch", resource: "pods"},
			// Cluster-scoped objects.
			{verb: "list", resource: "nodes"},
			{verb: "get", resource: "nodes"},
			{verb: "create", resource: "namespaces"},
			{verb: "delete", resource: "namespaces"},
			{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterroles"},
			{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
			{verb: "create", resource: "persistentvolumes"},
			{verb: "create", group: "certificates.k8s.io", resource: "certificatesigningrequests"},
		}

		// The authorizer learns of a new binding within moments.
		for _, a := range allowed {
			Eventually(func() bool {
				ok, _ := canI(ctx, ns, a)
				return ok
			}).WithContext(ctx).WithTimeout(rbacPropagation).Should(BeTrue(), "the ATC should be allowed %+v", a)
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
		logs, err := sa.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: podspec.StepContainerName}).DoRaw(ctx)
		Expect(err).NotTo(HaveOccurred(), "the ATC reading a step's logs")
		Expect(string(logs)).To(ContainSubstring("hello from the ATC pod"))

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

var _ = Describe("deploy/atc/rbac.yaml", func() {
	It("keeps the Role to the agreed rules", func() {
		objs, err := testenv.DecodeManifests(atcRBACManifest)
		Expect(err).NotTo(HaveOccurred())
		var role *rbacv1.Role
		for _, obj := range objs {
			if r, ok := obj.(*rbacv1.Role); ok {
				role = r
			}
		}
		Expect(role).NotTo(BeNil())
		Expect(role.Rules).To(ConsistOf(
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "get", "delete", "patch"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch", "create"}},
		))
	})
})
