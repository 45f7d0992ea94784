package worker

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/podspec"
)

// Labels of a team's step namespace.
const (
	// LabelStepNamespace marks a namespace as one team's steps on a worker;
	// deploy/networkpolicy lets such namespaces' step pods reach the ATC's
	// gRPC port and the blobstore.
	LabelStepNamespace = "porter.dev/step-namespace"
	// StepRoleName is the ClusterRole (deploy/atc/rbac.yaml) holding the
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
	// Privileged: the worker allows privileged steps, so the namespace
	// enforces the "privileged" Pod Security level instead of "baseline".
	Privileged bool
	// ATCServiceAccount and ATCNamespace name the ATC's identity, which the
	// RoleBinding gives the rights of Required in the namespace.
	ATCServiceAccount string
	ATCNamespace      string
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
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: t.ATCServiceAccount, Namespace: t.ATCNamespace}},
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
	if t.ATCServiceAccount == "" || !namespacePattern.MatchString(t.ATCNamespace) {
		errs = append(errs, fmt.Errorf("the ATC's service account %q in namespace %q", t.ATCServiceAccount, t.ATCNamespace))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("team %s's namespace on worker %s: %w", t.Team, t.Worker, err)
	}
	return nil
}
