package worker

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/netpolicy"
	"github.com/porter-ci/porter/pkg/podspec"
)

func teamNamespace(team string) TeamNamespace {
	return TeamNamespace{Worker: "local", Team: team, Namespace: "porter-steps-" + team,
		ATC: SubjectOf("system:serviceaccount:porter:atc-porter-runtime")}
}

func TestSubjectOf(t *testing.T) {
	if got := SubjectOf("porter-admin"); got != (rbacv1.Subject{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "porter-admin"}) {
		t.Errorf("SubjectOf(porter-admin) = %+v", got)
	}
}

func TestTeamNamespaceObjects(t *testing.T) {
	ns, binding, policy, err := teamNamespace("main").Objects()
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "baseline" {
		t.Errorf("enforce = %q, want baseline", got)
	}
	if ns.Labels[LabelStepNamespace] != "true" || ns.Labels[podspec.LabelTeam] != "main" || ns.Labels[podspec.LabelWorker] != "local" {
		t.Errorf("namespace labels %v", ns.Labels)
	}
	if binding.Namespace != "porter-steps-main" || binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != StepRoleName ||
		len(binding.Subjects) != 1 || binding.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "atc-porter-runtime", Namespace: "porter"}) {
		t.Errorf("role binding %+v", binding)
	}
	if policy.Namespace != "porter-steps-main" {
		t.Errorf("policy in %q", policy.Namespace)
	}

	priv := teamNamespace("main")
	priv.Privileged = true
	ns, _, _, err = priv.Objects()
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "privileged" {
		t.Errorf("a privileged worker's team namespace: enforce = %q, want privileged", got)
	}

	bad := teamNamespace("Main")
	bad.Namespace = "Bad_NS"
	if _, _, _, err := bad.Objects(); err == nil || !strings.Contains(err.Error(), `team "Main"`) || !strings.Contains(err.Error(), `namespace "Bad_NS"`) {
		t.Errorf("bad names: err = %v", err)
	}
}

// TestTeamNamespacesIsolate proves with the NetworkPolicy evaluator that a
// team's steps cannot open a connection to another team's, while steps of
// one team still reach each other.
func TestTeamNamespacesIsolate(t *testing.T) {
	var policies []networkingv1.NetworkPolicy
	namespaces := map[string]labels.Set{}
	step := map[string]netpolicy.Endpoint{}
	for i, team := range []string{"a", "b"} {
		tn := teamNamespace(team)
		ns, _, policy, err := tn.Objects()
		if err != nil {
			t.Fatal(err)
		}
		policies = append(policies, *policy)
		namespaces[ns.Name] = ns.Labels
		step[team] = netpolicy.Endpoint{Name: "step of team " + team, Namespace: ns.Name,
			Labels: podspec.StepLabels("b1-step-"+team, "1", team, tn.Worker), IP: netip.AddrFrom4([4]byte{10, 244, 0, byte(10 + i)})}
	}
	other := step["a"]
	other.Name = "another step of team a"
	other.IP = netip.MustParseAddr("10.244.0.20")
	for _, c := range []struct {
		from, to netpolicy.Endpoint
		want     bool
	}{
		{step["a"], step["b"], false},
		{step["b"], step["a"], false},
		{step["a"], other, true},
		{netpolicy.External(netip.MustParseAddr("203.0.113.10")), step["a"], false},
	} {
		v, err := netpolicy.Evaluate(policies, namespaces, netpolicy.Connection{From: c.from, To: c.to, Port: 8080})
		if err != nil {
			t.Fatal(err)
		}
		if v.Allowed != c.want {
			t.Errorf("%s -> %s: allowed = %v, want %v (%s)", c.from, c.to, v.Allowed, c.want, v.Reason)
		}
	}
}

// deployPolicies are deploy/networkpolicy's policies.
func deployPolicies(t *testing.T) []networkingv1.NetworkPolicy {
	t.Helper()
	var out []networkingv1.NetworkPolicy
	for _, f := range []string{"porter.yaml", "minio.yaml"} {
		body, err := os.ReadFile(filepath.Join("..", "..", "deploy", "networkpolicy", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(body), "\n---\n") {
			var p networkingv1.NetworkPolicy
			if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out = append(out, p)
		}
	}
	return out
}

// TestTeamNamespaceUnderDeployPolicies: with deploy/networkpolicy applied,
// a team's steps in their own namespace reach what the worker's steps
// reach (the ATC's gRPC, MinIO, DNS, the outside) and nothing else: not the
// ATC's API, PostgreSQL, the node, nor another team's steps.
func TestTeamNamespaceUnderDeployPolicies(t *testing.T) {
	deployed := deployPolicies(t)
	policies := append([]networkingv1.NetworkPolicy(nil), deployed...)
	namespaces := map[string]labels.Set{"porter": {}, "porter-minio": {}, "kube-system": {}}
	step := map[string]netpolicy.Endpoint{}
	for i, team := range []string{"a", "b"} {
		tn := teamNamespace(team)
		tn.Worker = "in-cluster"
		ns, _, isolation, err := tn.Objects()
		if err != nil {
			t.Fatal(err)
		}
		namespaces[ns.Name] = ns.Labels
		policies = append(policies, *isolation)
		for _, p := range tn.StepEgress(deployed, "porter") {
			policies = append(policies, *p)
		}
		step[team] = netpolicy.Endpoint{Name: "step of team " + team, Namespace: ns.Name,
			Labels: podspec.StepLabels("b1-s-"+team, "1", team, tn.Worker), IP: netip.AddrFrom4([4]byte{10, 244, 0, byte(10 + i)})}
	}
	grpc := corev1.ContainerPort{Name: "grpc", ContainerPort: 7777, Protocol: corev1.ProtocolTCP}
	http := corev1.ContainerPort{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}
	atc := netpolicy.Endpoint{Name: "ATC", Namespace: "porter", Labels: labels.Set{"app.kubernetes.io/name": "atc-porter-runtime"},
		IP: netip.MustParseAddr("10.244.0.250"), Ports: []corev1.ContainerPort{grpc, http}}
	pg := netpolicy.Endpoint{Name: "PostgreSQL", Namespace: "porter", Labels: labels.Set{"app.kubernetes.io/name": "postgres"},
		IP: netip.MustParseAddr("10.244.0.249"), Ports: []corev1.ContainerPort{{Name: "postgres", ContainerPort: 5432, Protocol: corev1.ProtocolTCP}}}
	minio := netpolicy.Endpoint{Name: "MinIO", Namespace: "porter-minio", Labels: labels.Set{"app.kubernetes.io/name": "minio"},
		IP: netip.MustParseAddr("10.244.0.248")}
	node := netpolicy.External(netip.MustParseAddr("10.245.0.1"))
	outside := netpolicy.External(netip.MustParseAddr("203.0.113.10"))
	for _, c := range []struct {
		what     string
		from, to netpolicy.Endpoint
		port     int32
		want     bool
	}{
		{"team step -> ATC grpc", step["a"], atc, 7777, true},
		{"team step -> ATC http", step["a"], atc, 8080, false},
		{"team step -> PostgreSQL", step["a"], pg, 5432, false},
		{"team step -> MinIO", step["a"], minio, 9000, true},
		{"team step -> the registry", step["a"], node, 5000, true},
		{"team step -> kubelet", step["a"], node, 10250, false},
		{"team step -> outside", step["a"], outside, 443, true},
		{"team a step -> team b step", step["a"], step["b"], 8080, false},
		{"team b step -> team a step", step["b"], step["a"], 8080, false},
	} {
		v, err := netpolicy.Evaluate(policies, namespaces, netpolicy.Connection{From: c.from, To: c.to, Port: c.port})
		if err != nil {
			t.Fatal(err)
		}
		if v.Allowed != c.want {
			t.Errorf("%s: allowed = %v, want %v (%s)", c.what, v.Allowed, c.want, v.Reason)
		}
	}
}
