package worker

import (
	"net/netip"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/porter-ci/porter/pkg/netpolicy"
	"github.com/porter-ci/porter/pkg/podspec"
)

func teamNamespace(team string) TeamNamespace {
	return TeamNamespace{Worker: "local", Team: team, Namespace: "porter-steps-" + team,
		ATCServiceAccount: "atc-porter-runtime", ATCNamespace: "porter"}
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
		len(binding.Subjects) != 1 || binding.Subjects[0].Name != "atc-porter-runtime" || binding.Subjects[0].Namespace != "porter" {
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
