// Package netpolicy evaluates networking.k8s.io/v1 NetworkPolicies: given
// the policies of a cluster, may one endpoint open a connection to another
// on a port? It is a pure function of the objects, so a test can prove what
// a set of policies allows on a cluster whose network plugin does not
// enforce them.
//
// The semantics are the API's (the NetworkPolicy reference):
//
//   - A pod is isolated for a direction (ingress or egress) when some policy
//     of its namespace selects it (podSelector) and has that direction in its
//     policyTypes; policyTypes left empty mean Ingress, plus Egress when the
//     policy has egress rules. A pod no policy isolates allows everything in
//     that direction.
//   - An isolated pod allows what any rule of any policy selecting it allows
//     (policies and rules add up). A rule allows a connection when one of its
//     peers matches the other end (no peers: any) and one of its ports
//     matches (no ports: any).
//   - A peer's podSelector alone means pods of the policy's namespace; a
//     namespaceSelector alone, every pod of the namespaces it selects; both,
//     the pods it selects in those namespaces. An ipBlock matches an address
//     inside its CIDR and outside every except.
//   - A port without protocol is TCP; a port number with endPort is a range;
//     a named port is the destination pod's container port of that name and
//     protocol.
//   - A connection needs both the sender's egress and the receiver's ingress.
//
// Where the reference leaves the behaviour to the implementation, this
// package takes the stricter reading, so that a proof of "denied" holds on
// any implementation:
//
//   - ipBlock matches pod addresses too (Calico does; Cilium does not), so an
//     ipBlock of 0.0.0.0/0 reaches pods unless their range is excepted.
//   - Host-network pods are their node's address: no pod or namespace
//     selector matches them, no policy isolates them, and named ports do not
//     resolve on them. Only an ipBlock reaches them.
//   - Connections are judged after Service translation: the destination is
//     the pod (or address) behind a Service, on the pod's port.
//
// Not modelled: traffic from a pod's own node (kubelet probes), which
// implementations let through whatever the policies say.
package netpolicy

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// namespaceNameLabel is the label the API server puts on every namespace,
// its own name as value.
const namespaceNameLabel = "kubernetes.io/metadata.name"

// Endpoint is one end of a connection: a pod (Namespace set) or an address
// outside the cluster (Namespace empty, only IP).
type Endpoint struct {
	// Name is for messages only (e.g. "porter/atc-porter-runtime-0").
	Name      string
	Namespace string
	Labels    labels.Set
	IP        netip.Addr
	// HostNetwork says the pod shares its node's network (and address).
	HostNetwork bool
	// Ports are the pod's container ports, against which named ports of
	// policies resolve.
	Ports []corev1.ContainerPort
}

// PodEndpoint is the endpoint of a pod as the API server has it: its
// namespace, labels, status.podIP (none yet: no ipBlock matches it) and the
// ports of all its containers, init containers included (a sidecar's).
func PodEndpoint(pod *corev1.Pod) (Endpoint, error) {
	e := Endpoint{
		Name:        pod.Namespace + "/" + pod.Name,
		Namespace:   pod.Namespace,
		Labels:      labels.Set(maps.Clone(pod.Labels)),
		HostNetwork: pod.Spec.HostNetwork,
	}
	if e.Namespace == "" {
		return Endpoint{}, fmt.Errorf("endpoint of pod %q: the pod has no namespace", pod.Name)
	}
	if pod.Status.PodIP != "" {
		ip, err := netip.ParseAddr(pod.Status.PodIP)
		if err != nil {
			return Endpoint{}, fmt.Errorf("endpoint of pod %s: parse pod IP: %w", e.Name, err)
		}
		e.IP = ip
	}
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		e.Ports = append(e.Ports, c.Ports...)
	}
	return e, nil
}

// External is an address outside the cluster.
func External(ip netip.Addr) Endpoint {
	return Endpoint{Name: ip.String(), IP: ip}
}

func (e Endpoint) isPod() bool { return e.Namespace != "" }

// policed says whether policies can select the endpoint (isolate it, or
// match it with a pod or namespace selector).
func (e Endpoint) policed() bool { return e.isPod() && !e.HostNetwork }

func (e Endpoint) String() string {
	if e.Name != "" {
		return e.Name
	}
	if e.isPod() {
		return fmt.Sprintf("pod in %s %s", e.Namespace, e.Labels)
	}
	return e.IP.String()
}

// Connection is a connection From opens To on Port; Protocol defaults to TCP.
type Connection struct {
	From, To Endpoint
	Port     int32
	Protocol corev1.Protocol
}

// Verdict is whether a connection is allowed, and why.
type Verdict struct {
	Allowed bool
	// Reason names the policies that decided each direction.
	Reason string
}

// Allowed reports whether from may connect to to on port and protocol.
// namespaces holds the labels of the namespaces pods are in (their
// kubernetes.io/metadata.name label is implied).
func Allowed(policies []networkingv1.NetworkPolicy, namespaces map[string]labels.Set, from, to Endpoint, port int32, proto corev1.Protocol) (bool, error) {
	v, err := Evaluate(policies, namespaces, Connection{From: from, To: to, Port: port, Protocol: proto})
	return v.Allowed, err
}

// Evaluate judges a connection: the sender's egress and the receiver's
// ingress must both allow it.
func Evaluate(policies []networkingv1.NetworkPolicy, namespaces map[string]labels.Set, c Connection) (Verdict, error) {
	if c.Protocol == "" {
		c.Protocol = corev1.ProtocolTCP
	}
	if c.Port < 1 || c.Port > 65535 {
		return Verdict{}, fmt.Errorf("evaluate connection from %s to %s: port %d is out of range", c.From, c.To, c.Port)
	}
	e := evaluator{policies: policies, namespaces: namespaces}
	out, outWhy, err := e.direction(c, networkingv1.PolicyTypeEgress)
	if err != nil {
		return Verdict{}, err
	}
	in, inWhy, err := e.direction(c, networkingv1.PolicyTypeIngress)
	if err != nil {
		return Verdict{}, err
	}
	return Verdict{Allowed: out && in, Reason: "egress: " + outWhy + "; ingress: " + inWhy}, nil
}

// Selecting names (namespace/name) the policies that isolate ep for the
// direction; none means ep allows everything that way.
func Selecting(policies []networkingv1.NetworkPolicy, ep Endpoint, dir networkingv1.PolicyType) ([]string, error) {
	var names []string
	for i := range policies {
		p := &policies[i]
		ok, err := selects(p, ep, dir)
		if err != nil {
			return nil, err
		}
		if ok {
			names = append(names, policyName(p))
		}
	}
	return names, nil
}

type evaluator struct {
	policies   []networkingv1.NetworkPolicy
	namespaces map[string]labels.Set
}

// rule is an ingress or egress rule: the peers at the other end, and the
// ports of the destination.
type rule struct {
	peers []networkingv1.NetworkPolicyPeer
	ports []networkingv1.NetworkPolicyPort
}

// direction judges one side of c: for egress the policies of c.From with
// c.To as peer, for ingress those of c.To with c.From as peer. The
// destination, whose ports named ports resolve against, is c.To either way.
func (e evaluator) direction(c Connection, dir networkingv1.PolicyType) (bool, string, error) {
	subject, peer := c.From, c.To
	if dir == networkingv1.PolicyTypeIngress {
		subject, peer = c.To, c.From
	}
	if !subject.policed() {
		return true, fmt.Sprintf("%s is not a pod on the pod network", subject), nil
	}
	var isolating []string
	for i := range e.policies {
		p := &e.policies[i]
		ok, err := selects(p, subject, dir)
		if err != nil {
			return false, "", err
		}
		if !ok {
			continue
		}
		isolating = append(isolating, policyName(p))
		for j, r := range rules(p, dir) {
			match, err := e.ruleMatches(p, r, peer, c)
			if err != nil {
				return false, "", fmt.Errorf("policy %s, %s rule %d: %w", policyName(p), strings.ToLower(string(dir)), j, err)
			}
			if match {
				return true, "allowed by " + policyName(p), nil
			}
		}
	}
	if len(isolating) == 0 {
		return true, fmt.Sprintf("%s is not isolated", subject), nil
	}
	return false, fmt.Sprintf("%s is isolated by %s and no rule allows %s", subject, strings.Join(isolating, ", "), peer), nil
}

// selects says whether p isolates ep for dir.
func selects(p *networkingv1.NetworkPolicy, ep Endpoint, dir networkingv1.PolicyType) (bool, error) {
	if p.Namespace == "" {
		return false, fmt.Errorf("policy %q has no namespace", p.Name)
	}
	if !ep.policed() || p.Namespace != ep.Namespace || !slices.Contains(policyTypes(p), dir) {
		return false, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
	if err != nil {
		return false, fmt.Errorf("policy %s: podSelector: %w", policyName(p), err)
	}
	return sel.Matches(ep.Labels), nil
}

// policyTypes are p's, or the API's default when it names none.
func policyTypes(p *networkingv1.NetworkPolicy) []networkingv1.PolicyType {
	if len(p.Spec.PolicyTypes) > 0 {
		return p.Spec.PolicyTypes
	}
	types := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(p.Spec.Egress) > 0 {
		types = append(types, networkingv1.PolicyTypeEgress)
	}
	return types
}

func rules(p *networkingv1.NetworkPolicy, dir networkingv1.PolicyType) []rule {
	var rs []rule
	if dir == networkingv1.PolicyTypeIngress {
		for _, r := range p.Spec.Ingress {
			rs = append(rs, rule{peers: r.From, ports: r.Ports})
		}
		return rs
	}
	for _, r := range p.Spec.Egress {
		rs = append(rs, rule{peers: r.To, ports: r.Ports})
	}
	return rs
}

func (e evaluator) ruleMatches(p *networkingv1.NetworkPolicy, r rule, peer Endpoint, c Connection) (bool, error) {
	peerOK := len(r.peers) == 0
	for i := range r.peers {
		ok, err := e.peerMatches(p.Namespace, &r.peers[i], peer)
		if err != nil {
			return false, fmt.Errorf("peer %d: %w", i, err)
		}
		if ok {
			peerOK = true
			break
		}
	}
	if !peerOK {
		return false, nil
	}
	if len(r.ports) == 0 {
		return true, nil
	}
	for _, port := range r.ports {
		if portMatches(port, c.To, c.Port, c.Protocol) {
			return true, nil
		}
	}
	return false, nil
}

func (e evaluator) peerMatches(policyNamespace string, peer *networkingv1.NetworkPolicyPeer, ep Endpoint) (bool, error) {
	if peer.IPBlock != nil {
		return ipBlockMatches(peer.IPBlock, ep.IP)
	}
	if peer.PodSelector == nil && peer.NamespaceSelector == nil {
		return false, errors.New("a peer needs a podSelector, a namespaceSelector or an ipBlock")
	}
	if !ep.policed() {
		return false, nil
	}
	if peer.NamespaceSelector == nil {
		if ep.Namespace != policyNamespace {
			return false, nil
		}
	} else {
		sel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
		if err != nil {
			return false, fmt.Errorf("namespaceSelector: %w", err)
		}
		if !sel.Matches(e.namespaceLabels(ep.Namespace)) {
			return false, nil
		}
	}
	if peer.PodSelector == nil {
		return true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
	if err != nil {
		return false, fmt.Errorf("podSelector: %w", err)
	}
	return sel.Matches(ep.Labels), nil
}

// namespaceLabels are the namespace's labels with the name label the API
// server sets on every namespace.
func (e evaluator) namespaceLabels(ns string) labels.Set {
	set := labels.Set{namespaceNameLabel: ns}
	maps.Copy(set, e.namespaces[ns])
	return set
}

func ipBlockMatches(b *networkingv1.IPBlock, ip netip.Addr) (bool, error) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return false, fmt.Errorf("ipBlock cidr: %w", err)
	}
	excepts := make([]netip.Prefix, 0, len(b.Except))
	for _, s := range b.Except {
		except, err := netip.ParsePrefix(s)
		if err != nil {
			return false, fmt.Errorf("ipBlock except: %w", err)
		}
		excepts = append(excepts, except)
	}
	if !ip.IsValid() || !cidr.Contains(ip) {
		return false, nil
	}
	for _, except := range excepts {
		if except.Contains(ip) {
			return false, nil
		}
	}
	return true, nil
}

// portMatches says whether a policy's port covers port/proto on dst.
func portMatches(p networkingv1.NetworkPolicyPort, dst Endpoint, port int32, proto corev1.Protocol) bool {
	want := corev1.ProtocolTCP
	if p.Protocol != nil {
		want = *p.Protocol
	}
	if want != proto {
		return false
	}
	if p.Port == nil {
		return true
	}
	if p.Port.Type == intstr.Int {
		lo, hi := p.Port.IntVal, p.Port.IntVal
		if p.EndPort != nil {
			hi = *p.EndPort
		}
		return lo <= port && port <= hi
	}
	if !dst.policed() {
		return false
	}
	for _, cp := range dst.Ports {
		cpProto := cp.Protocol
		if cpProto == "" {
			cpProto = corev1.ProtocolTCP
		}
		if cp.Name == p.Port.StrVal && cpProto == proto && cp.ContainerPort == port {
			return true
		}
	}
	return false
}

func policyName(p *networkingv1.NetworkPolicy) string { return p.Namespace + "/" + p.Name }
