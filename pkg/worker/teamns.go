package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/pkg/podspec"
)

// Labels of a team's step namespace.
const (
	// LabelStepNamespace marks a namespace as one team's steps on a worker;
	// deploy/networkpolicy lets such namespaces' step pods reach the ATC's
	// gRPC port and the blobstore.
	LabelStepNamespace = "porter.dev/step-namespace"
	// StepRoleName is the ClusterRole (deploy/atc/team-namespaces.yaml) with the
	// rights of Required; a team's namespace binds it to the ATC.
	StepRoleName = "porter-step-runtime"
	// TeamIsolationPolicy is the NetworkPolicy of a team's namespace.
	TeamIsolationPolicy = "porter-team-isolation"
)

// TeamNamespace is the namespace one team's steps run in on a worker,
// apart from every other team's, as the ATC declares it.
type TeamNamespace struct {
	Worker    string
	Team      string
	Namespace string
	// WorkerNamespace is the namespace the worker was declared with: its
	// step egress policies are copied (StepEgress).
	WorkerNamespace string
	// Privileged: the worker allows privileged steps, so the namespace
	// enforces the "privileged" Pod Security level instead of "baseline".
	Privileged bool
	// ATC is the server's identity (SubjectOf its user name), which the
	// RoleBinding gives the rights of Required in the namespace.
	ATC rbacv1.Subject
}

// SubjectOf is the RBAC subject of an authenticated user name, as a
// SelfSubjectReview reports it: a service account's own kind for
// system:serviceaccount:NAMESPACE:NAME, a user otherwise.
func SubjectOf(username string) rbacv1.Subject {
	if rest, ok := strings.CutPrefix(username, "system:serviceaccount:"); ok {
		if ns, name, ok := strings.Cut(rest, ":"); ok {
			return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
		}
	}
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: username}
}

// TeamNamespaceObjects are the objects of a team's step namespace: the
// Namespace with its Pod Security labels, a RoleBinding of StepRoleName to
// the ATC (so that it may run steps there and nothing more), and a
// NetworkPolicy under which the namespace's pods accept connections from
// pods of the same namespace only. Steps of another team, in another
// namespace, cannot reach them, whatever their own egress allows.
func (t TeamNamespace) Objects() (*corev1.Namespace, *rbacv1.RoleBinding, *networkingv1.NetworkPolicy, error) {
	if err := t.validate(); err != nil {
		return nil, nil, nil, err
	}
	level := "baseline"
	if t.Privileged {
		level = "privileged"
	}
	labels := map[string]string{
		podspec.LabelManagedBy: podspec.ManagedByPorter,
		podspec.LabelWorker:    podspec.LabelValue(t.Worker),
		podspec.LabelTeam:      podspec.LabelValue(t.Team),
		LabelStepNamespace:     "true",
	}
	nsLabels := map[string]string{
		"pod-security.kubernetes.io/enforce":         level,
		"pod-security.kubernetes.io/enforce-version": "latest",
		"pod-security.kubernetes.io/warn":            "restricted",
		"pod-security.kubernetes.io/warn-version":    "latest",
		"pod-security.kubernetes.io/audit":           "restricted",
		"pod-security.kubernetes.io/audit-version":   "latest",
	}
	for k, v := range labels {
		nsLabels[k] = v
	}
	ns := &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: t.Namespace, Labels: nsLabels},
	}
	binding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: StepRoleName, Namespace: t.Namespace, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: StepRoleName},
		Subjects:   []rbacv1.Subject{t.ATC},
	}
	policy := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: TeamIsolationPolicy, Namespace: t.Namespace, Labels: labels},
		Spec: networkingv1.NetworkPolicySpec{
			// Every pod of the namespace, Porter's or not.
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			// A peer with only a podSelector means pods of this namespace.
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}},
			}},
		},
	}
	return ns, binding, policy, nil
}

func (t TeamNamespace) validate() error {
	var errs []error
	if !namePattern.MatchString(t.Worker) {
		errs = append(errs, fmt.Errorf("worker %q is not a worker name", t.Worker))
	}
	if !namePattern.MatchString(t.Team) {
		errs = append(errs, fmt.Errorf("team %q is not a team name", t.Team))
	}
	if !namespacePattern.MatchString(t.Namespace) {
		errs = append(errs, fmt.Errorf("namespace %q is not a Kubernetes namespace name", t.Namespace))
	}
	if t.ATC.Name == "" || t.ATC.Kind == "" {
		errs = append(errs, errors.New("the ATC's identity is unknown"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("team %s's namespace on worker %s: %w", t.Team, t.Worker, err)
	}
	return nil
}

// EnsureTeamNamespace creates the objects of a team's step namespace that
// are missing (the ATC's identity comes from a SelfSubjectReview). An
// existing namespace must be one Porter made for the same team: the server
// never takes over a namespace it did not create. The network policies are
// TeamIsolationPolicy and StepEgress of the worker's namespace's; existing
// ones are left as they are. Whoever runs this needs
// deploy/atc/team-namespaces.yaml's rights: get and create namespaces,
// create rolebindings, bind StepRoleName, list networkpolicies; the
// policies are created with the rights the RoleBinding has just given.
func EnsureTeamNamespace(ctx context.Context, kube kubernetes.Interface, t TeamNamespace) error {
	review, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("team %s's namespace %s: who am I (SelfSubjectReview): %w", t.Team, t.Namespace, err)
	}
	t.ATC = SubjectOf(review.Status.UserInfo.Username)
	ns, binding, policy, err := t.Objects()
	if err != nil {
		return err
	}
	_, err = kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var have *corev1.Namespace
		if have, err = kube.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{}); err == nil &&
			(have.Labels[LabelStepNamespace] != "true" || have.Labels[podspec.LabelTeam] != ns.Labels[podspec.LabelTeam]) {
			return fmt.Errorf("team %s's namespace %s exists and is not Porter's for that team (labels %s=true, %s=%s)",
				t.Team, ns.Name, LabelStepNamespace, podspec.LabelTeam, ns.Labels[podspec.LabelTeam])
		}
	}
	if err != nil {
		return fmt.Errorf("create team %s's namespace %s: %w", t.Team, ns.Name, err)
	}
	if _, err := kube.RbacV1().RoleBindings(ns.Name).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the role binding of team %s's namespace %s: %w", t.Team, ns.Name, err)
	}
	base, err := kube.NetworkingV1().NetworkPolicies(t.WorkerNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("read the network policies of worker %s's namespace %s: %w", t.Worker, t.WorkerNamespace, err)
	}
	for _, p := range append([]*networkingv1.NetworkPolicy{policy}, t.StepEgress(base.Items, t.WorkerNamespace)...) {
		// The RoleBinding just created takes a moment to reach the
		// authorizer: Forbidden is retried for a few seconds.
		var forbidden error
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := kube.NetworkingV1().NetworkPolicies(ns.Name).Create(ctx, p, metav1.CreateOptions{})
			switch {
			case err == nil || apierrors.IsAlreadyExists(err):
				return true, nil
			case apierrors.IsForbidden(err):
				forbidden = err
				return false, nil
			}
			return false, err
		})
		if err != nil && forbidden != nil {
			err = forbidden
		}
		if err != nil {
			return fmt.Errorf("create network policy %s of team %s's namespace %s: %w", p.Name, t.Team, ns.Name, err)
		}
	}
	return nil
}

// StepEgress are the egress rules of the worker's own namespace for its
// step pods, for a team's namespace: each policy of base (the policies of
// the worker's namespace, baseNS) that selects step pods and limits their
// egress, with its egress rules only (ingress is TeamIsolationPolicy's).
// A peer that names pods without a namespace meant pods of baseNS (the
// ATC, for deploy/networkpolicy's porter-steps), and still does. So a
// team's steps reach what the worker's steps reach, and no more.
func (t TeamNamespace) StepEgress(base []networkingv1.NetworkPolicy, baseNS string) []*networkingv1.NetworkPolicy {
	step := labels.Set(podspec.StepLabels("any", "1", t.Team, t.Worker))
	var out []*networkingv1.NetworkPolicy
	for _, p := range base {
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil || !sel.Matches(step) || !slices.Contains(effectiveTypes(p.Spec), networkingv1.PolicyTypeEgress) {
			continue
		}
		c := &networkingv1.NetworkPolicy{
			TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: t.Namespace, Labels: map[string]string{
				podspec.LabelManagedBy: podspec.ManagedByPorter, podspec.LabelTeam: podspec.LabelValue(t.Team),
			}},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: *p.Spec.PodSelector.DeepCopy(),
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			},
		}
		for _, r := range p.Spec.Egress {
			r := *r.DeepCopy()
			for i := range r.To {
				if r.To[i].PodSelector != nil && r.To[i].NamespaceSelector == nil {
					r.To[i].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": baseNS}}
				}
			}
			c.Spec.Egress = append(c.Spec.Egress, r)
		}
		out = append(out, c)
	}
	return out
}

// effectiveTypes are a policy's policyTypes as the API reads them: when
// none are given, Ingress, plus Egress if it has egress rules.
func effectiveTypes(s networkingv1.NetworkPolicySpec) []networkingv1.PolicyType {
	if len(s.PolicyTypes) > 0 {
		return s.PolicyTypes
	}
	if len(s.Egress) > 0 {
		return []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	}
	return []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
}
