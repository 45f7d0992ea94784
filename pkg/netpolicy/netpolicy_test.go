package netpolicy_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/netpolicy"
)

// The endpoints of the table: pods of namespaces "a" (team red) and "b"
// (team blue), a namespace "c" with no labels given, a host-network pod and
// an address outside the cluster.
var (
	web = netpolicy.Endpoint{Name: "a/web", Namespace: "a", Labels: labels.Set{"app": "web", "tier": "front"},
		IP: netip.MustParseAddr("10.0.0.1"),
		Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080},
			{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
		}}
	client = netpolicy.Endpoint{Name: "a/client", Namespace: "a", Labels: labels.Set{"app": "client"},
		IP: netip.MustParseAddr("10.0.0.2")}
	db = netpolicy.Endpoint{Name: "b/db", Namespace: "b", Labels: labels.Set{"app": "db"},
		IP:    netip.MustParseAddr("10.0.1.1"),
		Ports: []corev1.ContainerPort{{Name: "pg", ContainerPort: 5432, Protocol: corev1.ProtocolTCP}}}
	bClient = netpolicy.Endpoint{Name: "b/client", Namespace: "b", Labels: labels.Set{"app": "client"},
		IP: netip.MustParseAddr("10.0.1.2")}
	cClient = netpolicy.Endpoint{Name: "c/client", Namespace: "c", Labels: labels.Set{"app": "client"},
		IP: netip.MustParseAddr("10.0.2.2")}
	hostPod = netpolicy.Endpoint{Name: "infra/minio", Namespace: "infra", Labels: labels.Set{"app": "minio"},
		IP: netip.MustParseAddr("192.168.1.10"), HostNetwork: true,
		Ports: []corev1.ContainerPort{{Name: "s3", ContainerPort: 9000}}}
	outside = netpolicy.External(netip.MustParseAddr("203.0.113.7"))

	namespaces = map[string]labels.Set{
		"a": {"team": "red"},
		"b": {"team": "blue"},
	}
)

// policies decodes YAML documents of NetworkPolicies.
func policies(t *testing.T, docs string) []networkingv1.NetworkPolicy {
	t.Helper()
	var ps []networkingv1.NetworkPolicy
	for doc := range strings.SplitSeq(docs, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var p networkingv1.NetworkPolicy
		if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
			t.Fatalf("decode policy %q: %v", doc, err)
		}
		ps = append(ps, p)
	}
	return ps
}

const (
	denyIngressA = `
metadata: {name: deny-ingress, namespace: a}
spec:
  podSelector: {}
  policyTypes: [Ingress]`
	denyEgressA = `
metadata: {name: deny-egress, namespace: a}
spec:
  podSelector: {}
  policyTypes: [Egress]`
	denyIngressB = `
metadata: {name: deny-ingress, namespace: b}
spec:
  podSelector: {}
  policyTypes: [Ingress]`
)

func TestAllowed(t *testing.T) {
	cases := []struct {
		name     string
		policies string
		from, to netpolicy.Endpoint
		port     int32
		proto    corev1.Protocol
		want     bool
	}{
		{name: "no policy allows everything", from: client, to: db, port: 5432, want: true},
		{name: "no policy allows everything, from outside too", from: outside, to: web, port: 1, proto: corev1.ProtocolUDP, want: true},

		// Isolation.
		{name: "deny-all ingress denies pods of its own namespace", policies: denyIngressA, from: client, to: web, port: 8080},
		{name: "deny-all ingress denies pods of other namespaces", policies: denyIngressA, from: db, to: web, port: 8080},
		{name: "deny-all ingress of one namespace leaves another's pods open", policies: denyIngressA, from: client, to: db, port: 5432, want: true},
		{name: "deny-all ingress leaves the isolated pods' egress open", policies: denyIngressA, from: web, to: db, port: 5432, want: true},
		{name: "deny-all egress denies the pods' connections", policies: denyEgressA, from: web, to: db, port: 5432},
		{name: "deny-all egress leaves their ingress open", policies: denyEgressA, from: db, to: web, port: 8080, want: true},
		{name: "a podSelector isolates only the pods it selects", policies: `
metadata: {name: deny-web, namespace: a}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]`, from: web, to: client, port: 80, want: true},
		{name: "without policyTypes, egress rules isolate both directions", policies: `
metadata: {name: egress-only-rules, namespace: a}
spec:
  podSelector: {}
  egress: [{}]`, from: outside, to: web, port: 8080},
		{name: "without policyTypes, egress rules allow as written", policies: `
metadata: {name: egress-only-rules, namespace: a}
spec:
  podSelector: {}
  egress: [{}]`, from: web, to: outside, port: 443, want: true},
		{name: "without policyTypes, ingress rules leave egress open", policies: `
metadata: {name: ingress-only, namespace: a}
spec:
  podSelector: {}
  ingress: []`, from: web, to: outside, port: 443, want: true},
		{name: "an empty rule allows everything", policies: denyIngressA + `
---
metadata: {name: allow-all, namespace: a}
spec:
  podSelector: {}
  ingress: [{}]`, from: outside, to: web, port: 12345, want: true},
		{name: "policies add up", policies: denyIngressB + `
---
metadata: {name: db-from-clients, namespace: b}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: client}}}]`, from: bClient, to: db, port: 5432, want: true},

		// Peers.
		{name: "a podSelector peer means pods of the policy's namespace", policies: `
metadata: {name: db-from-clients, namespace: b}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: client}}}]`, from: client, to: db, port: 5432},
		{name: "a namespaceSelector peer means every pod of the namespaces", policies: `
metadata: {name: db-from-red, namespace: b}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {team: red}}}]`, from: client, to: db, port: 5432, want: true},
		{name: "a namespaceSelector peer excludes other namespaces", policies: `
metadata: {name: db-from-red, namespace: b}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {team: red}}}]`, from: bClient, to: db, port: 5432},
		{name: "both selectors in one peer must both match", policies: `
metadata: {name: db-from-red-web, namespace: b}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {team: red}}, podSelector: {matchLabels: {app: web}}}]`, from: client, to: db, port: 5432},
		{name: "separate peers are alternatives", policies: `
metadata: {name: db-from-red-or-web, namespace: b}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {team: red}}}, {podSelector: {matchLabels: {app: web}}}]`, from: client, to: db, port: 5432, want: true},
		{name: "every namespace has its name label", policies: `
metadata: {name: db-from-c, namespace: b}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: c}}}]`, from: cClient, to: db, port: 5432, want: true},
		{name: "matchExpressions Exists", policies: `
metadata: {name: db-from-tiered, namespace: b}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{namespaceSelector: {}, podSelector: {matchExpressions: [{key: tier, operator: Exists}]}}]`, from: web, to: db, port: 5432, want: true},
		{name: "matchExpressions Exists refuses a pod without the key", policies: `
metadata: {name: db-from-tiered, namespace: b}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress:
  - from: [{namespaceSelector: {}, podSelector: {matchExpressions: [{key: tier, operator: Exists}]}}]`, from: client, to: db, port: 5432},
		{name: "matchExpressions NotIn", policies: `
metadata: {name: db-not-from-web, namespace: b}
spec:
  podSelector: {matchExpressions: [{key: app, operator: In, values: [db]}]}
  ingress:
  - from: [{namespaceSelector: {}, podSelector: {matchExpressions: [{key: app, operator: NotIn, values: [web]}]}}]`, from: web, to: db, port: 5432},
		{name: "selectors match no address outside the cluster", policies: `
metadata: {name: web-from-anything, namespace: a}
spec:
  podSelector: {}
  ingress:
  - from: [{namespaceSelector: {}}]`, from: outside, to: web, port: 8080},

		// ipBlock.
		{name: "ipBlock matches an outside address in its CIDR", policies: `
metadata: {name: web-from-net, namespace: a}
spec:
  podSelector: {}
  ingress:
  - from: [{ipBlock: {cidr: 203.0.113.0/24}}]`, from: outside, to: web, port: 8080, want: true},
		{name: "ipBlock does not match an address in an except", policies: `
metadata: {name: web-from-net, namespace: a}
spec:
  podSelector: {}
  ingress:
  - from: [{ipBlock: {cidr: 203.0.113.0/24, except: [203.0.113.0/29]}}]`, from: outside, to: web, port: 8080},
		{name: "ipBlock matches pods by address", policies: `
metadata: {name: egress-world, namespace: a}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
  - to: [{ipBlock: {cidr: 0.0.0.0/0}}]`, from: client, to: db, port: 5432, want: true},
		{name: "an ipBlock except keeps pods out", policies: `
metadata: {name: egress-world, namespace: a}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
  - to: [{ipBlock: {cidr: 0.0.0.0/0, except: [10.0.0.0/16]}}]`, from: client, to: db, port: 5432},
		{name: "an ipBlock except keeps only its range out", policies: `
metadata: {name: egress-world, namespace: a}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
  - to: [{ipBlock: {cidr: 0.0.0.0/0, except: [10.0.0.0/16]}}]`, from: client, to: outside, port: 443, want: true},

		// Ports.
		{name: "a port number", policies: denyIngressB + `
---
metadata: {name: db-5432, namespace: b}
spec:
  podSelector: {}
  ingress: [{ports: [{port: 5432}]}]`, from: client, to: db, port: 5432, want: true},
		{name: "another port number", policies: denyIngressB + `
---
metadata: {name: db-5432, namespace: b}
spec:
  podSelector: {}
  ingress: [{ports: [{port: 5432}]}]`, from: client, to: db, port: 5433},
		{name: "a port without protocol is TCP", policies: `
metadata: {name: db-5432, namespace: b}
spec:
  podSelector: {}
  ingress: [{ports: [{port: 5432}]}]`, from: client, to: db, port: 5432, proto: corev1.ProtocolUDP},
		{name: "a UDP port", policies: `
metadata: {name: db-5432-udp, namespace: b}
spec:
  podSelector: {}
  ingress: [{ports: [{port: 5432, protocol: UDP}]}]`, from: client, to: db, port: 5432, proto: corev1.ProtocolUDP, want: true},
		{name: "a protocol without port is every port", policies: `
metadata: {name: db-udp, namespace: b}
spec:
  podSelector: {}
  ingress: [{ports: [{protocol: UDP}]}]`, from: client, to: db, port: 9, proto: corev1.ProtocolUDP, want: true},
		{name: "endPort: the last port of the range", policies: `
metadata: {name: db-range, namespace: b}
spec:
  podSelector: {}
  ingress: [{ports: [{port: 5000, endPort: 5432}]}]`, from: client, to: db, port: 5432, want: true},
		{name: "endPort: past the range", policies: `
metadata: {name: db-range, namespace: b}
spec:
  podSelector: {}
  ingress: [{ports: [{port: 5000, endPort: 5432}]}]`, from: client, to: db, port: 5433},
		{name: "a named port is the destination's container port", policies: `
metadata: {name: web-http, namespace: a}
spec:
  podSelector: {}
  ingress: [{ports: [{port: http}]}]`, from: client, to: web, port: 8080, want: true},
		{name: "a named port is no other port", policies: `
metadata: {name: web-http, namespace: a}
spec:
  podSelector: {}
  ingress: [{ports: [{port: http}]}]`, from: client, to: web, port: 8081},
		{name: "a named port has its container port's protocol", policies: `
metadata: {name: web-http-udp, namespace: a}
spec:
  podSelector: {}
  ingress: [{ports: [{port: http, protocol: UDP}]}]`, from: client, to: web, port: 8080, proto: corev1.ProtocolUDP},
		{name: "a named UDP port", policies: `
metadata: {name: web-dns, namespace: a}
spec:
  podSelector: {}
  ingress: [{ports: [{port: dns, protocol: UDP}]}]`, from: client, to: web, port: 53, proto: corev1.ProtocolUDP, want: true},
		{name: "a named port in an egress rule resolves on the destination", policies: `
metadata: {name: client-to-pg, namespace: a}
spec:
  podSelector: {matchLabels: {app: client}}
  policyTypes: [Egress]
  egress: [{ports: [{port: pg}]}]`, from: client, to: db, port: 5432, want: true},
		{name: "a named port does not resolve outside the cluster", policies: `
metadata: {name: client-to-pg, namespace: a}
spec:
  podSelector: {matchLabels: {app: client}}
  policyTypes: [Egress]
  egress: [{ports: [{port: pg}]}]`, from: client, to: outside, port: 5432},

		// Both directions.
		{name: "egress allowed, ingress denied", policies: denyIngressB + `
---
metadata: {name: client-to-db, namespace: a}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress: [{to: [{namespaceSelector: {matchLabels: {team: blue}}}]}]`, from: client, to: db, port: 5432},
		{name: "ingress allowed, egress denied", policies: denyEgressA + `
---
metadata: {name: db-from-red, namespace: b}
spec:
  podSelector: {}
  ingress: [{from: [{namespaceSelector: {matchLabels: {team: red}}}]}]`, from: client, to: db, port: 5432},
		{name: "egress and ingress allowed", policies: denyEgressA + `
---
metadata: {name: client-to-db, namespace: a}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress: [{to: [{namespaceSelector: {matchLabels: {team: blue}}}]}]
---
metadata: {name: db-from-red, namespace: b}
spec:
  podSelector: {}
  ingress: [{from: [{namespaceSelector: {matchLabels: {team: red}}}]}]`, from: client, to: db, port: 5432, want: true},

		// Host network.
		{name: "a host-network pod is not isolated", policies: `
metadata: {name: deny-ingress, namespace: infra}
spec:
  podSelector: {}
  policyTypes: [Ingress, Egress]`, from: client, to: hostPod, port: 9000, want: true},
		{name: "a host-network pod's egress is not isolated", policies: `
metadata: {name: deny-ingress, namespace: infra}
spec:
  podSelector: {}
  policyTypes: [Ingress, Egress]`, from: hostPod, to: outside, port: 443, want: true},
		{name: "selectors do not match a host-network pod", policies: denyEgressA + `
---
metadata: {name: to-minio, namespace: a}
spec:
  podSelector: {}
  egress: [{to: [{namespaceSelector: {}, podSelector: {matchLabels: {app: minio}}}]}]`, from: client, to: hostPod, port: 9000},
		{name: "an ipBlock matches a host-network pod's address", policies: denyEgressA + `
---
metadata: {name: to-minio, namespace: a}
spec:
  podSelector: {}
  egress: [{to: [{ipBlock: {cidr: 192.168.1.10/32}}], ports: [{port: 9000}]}]`, from: client, to: hostPod, port: 9000, want: true},
		{name: "named ports do not resolve on a host-network pod", policies: denyEgressA + `
---
metadata: {name: to-minio, namespace: a}
spec:
  podSelector: {}
  egress: [{to: [{ipBlock: {cidr: 192.168.1.10/32}}], ports: [{port: s3}]}]`, from: client, to: hostPod, port: 9000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ps := policies(t, c.policies)
			got, err := netpolicy.Allowed(ps, namespaces, c.from, c.to, c.port, c.proto)
			if err != nil {
				t.Fatalf("Allowed: %v", err)
			}
			if got != c.want {
				v, _ := netpolicy.Evaluate(ps, namespaces, netpolicy.Connection{From: c.from, To: c.to, Port: c.port, Protocol: c.proto})
				t.Errorf("%s -> %s:%d/%s: allowed = %v, want %v (%s)", c.from, c.to, c.port, c.proto, got, c.want, v.Reason)
			}
		})
	}
}

func TestEvaluateReason(t *testing.T) {
	ps := policies(t, denyIngressB+"\n---\n"+denyEgressA)
	v, err := netpolicy.Evaluate(ps, namespaces, netpolicy.Connection{From: client, To: db, Port: 5432})
	if err != nil {
		t.Fatal(err)
	}
	if v.Allowed {
		t.Fatalf("allowed: %s", v.Reason)
	}
	for _, want := range []string{"a/client is isolated by a/deny-egress", "b/db is isolated by b/deny-ingress"} {
		if !strings.Contains(v.Reason, want) {
			t.Errorf("reason %q does not say %q", v.Reason, want)
		}
	}
}

func TestEvaluateErrors(t *testing.T) {
	cases := []struct {
		name, policies string
		port           int32
		want           string
	}{
		{name: "bad selector operator", port: 5432, want: "podSelector", policies: `
metadata: {name: bad, namespace: b}
spec:
  podSelector: {matchExpressions: [{key: app, operator: Sometimes}]}`},
		{name: "bad CIDR", port: 5432, want: "ipBlock cidr", policies: `
metadata: {name: bad, namespace: b}
spec:
  podSelector: {}
  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/33}}]}]`},
		{name: "bad except", port: 5432, want: "ipBlock except", policies: `
metadata: {name: bad, namespace: b}
spec:
  podSelector: {}
  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8, except: [nonsense]}}]}]`},
		{name: "empty peer", port: 5432, want: "needs a podSelector", policies: `
metadata: {name: bad, namespace: b}
spec:
  podSelector: {}
  ingress: [{from: [{}]}]`},
		{name: "no namespace", port: 5432, want: "no namespace", policies: `
metadata: {name: bad}
spec:
  podSelector: {}`},
		{name: "port 0", port: 0, want: "out of range"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := netpolicy.Allowed(policies(t, c.policies), namespaces, client, db, c.port, corev1.ProtocolTCP)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error = %v, want one saying %q", err, c.want)
			}
		})
	}
}

func TestPodEndpoint(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "step", Namespace: "porter", Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "sidecar", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9100}}}},
			Containers:     []corev1.Container{{Name: "main", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}},
		},
		Status: corev1.PodStatus{PodIP: "10.244.0.9"},
	}
	ep, err := netpolicy.PodEndpoint(pod)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Name != "porter/step" || ep.Namespace != "porter" || ep.IP != netip.MustParseAddr("10.244.0.9") || ep.Labels.Get("app") != "x" {
		t.Errorf("endpoint = %+v", ep)
	}
	var names []string
	for _, p := range ep.Ports {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"metrics", "http"}) {
		t.Errorf("ports = %v, want the sidecar's and the main container's", names)
	}
	// The named port of the init container (a native sidecar's) resolves.
	ps := policies(t, `
metadata: {name: metrics, namespace: porter}
spec:
  podSelector: {}
  ingress: [{ports: [{port: metrics}]}]`)
	ok, err := netpolicy.Allowed(ps, nil, outside, ep, 9100, "")
	if err != nil || !ok {
		t.Errorf("to the sidecar's named port: allowed = %v, %v", ok, err)
	}

	pod.Status.PodIP = "not-an-ip"
	if _, err := netpolicy.PodEndpoint(pod); err == nil {
		t.Error("a bad pod IP gave no error")
	}
	pod.Status.PodIP, pod.Namespace = "", ""
	if _, err := netpolicy.PodEndpoint(pod); err == nil {
		t.Error("a pod without namespace gave no error")
	}
}

func TestSelecting(t *testing.T) {
	ps := policies(t, denyIngressA+"\n---\n"+denyEgressA+"\n---\n"+denyIngressB)
	for _, c := range []struct {
		ep   netpolicy.Endpoint
		dir  networkingv1.PolicyType
		want []string
	}{
		{web, networkingv1.PolicyTypeIngress, []string{"a/deny-ingress"}},
		{web, networkingv1.PolicyTypeEgress, []string{"a/deny-egress"}},
		{db, networkingv1.PolicyTypeEgress, nil},
		{outside, networkingv1.PolicyTypeIngress, nil},
	} {
		got, err := netpolicy.Selecting(ps, c.ep, c.dir)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Selecting(%s, %s) = %v, want %v", c.ep, c.dir, got, c.want)
		}
	}
}
