package netpol_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/porter-ci/porter/pkg/netpolicy"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/worker"
	"github.com/porter-ci/porter/test/testenv"
)

const (
	// inClusterWorker is deploy/atc's PORTER_WORKER, the worker label of its
	// step pods.
	inClusterWorker = "in-cluster"
	porterImage     = "porter.local/porter:dev"
	// fly and the rest of the internet (TEST-NET-3).
	outsideIP = "203.0.113.10"
)

// The policies deploy/ renders, with the pods they must tell apart: two
// real step pods (teams a and b) and the ATC, PostgreSQL and MinIO as
// deploy/ declares them.
var _ = Describe("deploy/networkpolicy", Ordered, ContinueOnFailure, func() {
	var (
		rendered []runtime.Object // kubectl kustomize deploy/
		example  []runtime.Object // deploy/networkpolicy/cross-team.example.yaml
		ns       string           // where this suite's objects live
		// workerNS is the in-cluster ATC's namespace, where its step pods
		// run and the step policies apply.
		workerNS     string
		namespaces   map[string]labels.Set
		stepA, stepB netpolicy.Endpoint
		atc, pg      netpolicy.Endpoint
		minio, dns   netpolicy.Endpoint
		node         netpolicy.Endpoint
		apiService   netpolicy.Endpoint
		apiPort      int32
	)

	BeforeAll(func(ctx SpecContext) {
		start := time.Now()
		rendered = render(ctx, "deploy")
		var err error
		example, err = testenv.DecodeManifests(filepath.Join(cluster.root, "deploy", "networkpolicy", "cross-team.example.yaml"))
		Expect(err).NotTo(HaveOccurred())

		ns, err = testenv.CreateNamespace(ctx, cluster.client, "porter-netpol-")
		DeferCleanup(func(ctx SpecContext) {
			if ns == "" {
				return
			}
			err := cluster.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				Fail(fmt.Sprintf("deleting namespace %s: %v", ns, err))
			}
		}, NodeTimeout(30*time.Second))
		Expect(err).NotTo(HaveOccurred())

		podSubnet, err := netip.ParsePrefix(cluster.env["PORTER_CLUSTER_POD_SUBNET"])
		Expect(err).NotTo(HaveOccurred(), "PORTER_CLUSTER_POD_SUBNET")
		nodeIP, err := netip.ParseAddr(cluster.env["PORTER_CLUSTER_NODE_IP"])
		Expect(err).NotTo(HaveOccurred(), "PORTER_CLUSTER_NODE_IP")
		node = netpolicy.External(nodeIP)
		node.Name = "the node " + nodeIP.String()

		// Porter's pods as deploy/ declares them. ATC and PostgreSQL are
		// not running here: they get addresses of the pod subnet, as they
		// would have.
		atcSet := find[*appsv1.StatefulSet](rendered, "atc-porter-runtime")
		workerNS = atcSet.Namespace
		atc = templateEndpoint(atcSet.Namespace, atcSet.Name+"-0", atcSet.Spec.Template, nthFromTop(podSubnet, 1), nodeIP)
		pgSet := find[*appsv1.StatefulSet](rendered, "postgres")
		pg = templateEndpoint(pgSet.Namespace, pgSet.Name+"-0", pgSet.Spec.Template, nthFromTop(podSubnet, 2), nodeIP)
		minioDep := find[*appsv1.Deployment](rendered, "minio")
		minio = templateEndpoint(minioDep.Namespace, minioDep.Name, minioDep.Spec.Template, nthFromTop(podSubnet, 3), nodeIP)

		// Cluster DNS as it runs: deploy/coredns's pod, found by its selector.
		coredns := find[*appsv1.Deployment](render(ctx, filepath.Join("deploy", "coredns")), "coredns")
		sel, err := metav1.LabelSelectorAsSelector(coredns.Spec.Selector)
		Expect(err).NotTo(HaveOccurred())
		dnsPods, err := cluster.client.CoreV1().Pods(coredns.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		Expect(err).NotTo(HaveOccurred())
		Expect(dnsPods.Items).NotTo(BeEmpty(), "no CoreDNS pod in %s (%s)", coredns.Namespace, sel)
		dns, err = netpolicy.PodEndpoint(&dnsPods.Items[0])
		Expect(err).NotTo(HaveOccurred())

		// Namespaces' labels: deploy/'s, and kube-system's as it is.
		namespaces = map[string]labels.Set{}
		for _, obj := range rendered {
			if n, ok := obj.(*corev1.Namespace); ok {
				namespaces[n.Name] = n.Labels
			}
		}
		ks, err := cluster.client.CoreV1().Namespaces().Get(ctx, coredns.Namespace, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		namespaces[ks.Name] = ks.Labels

		// The API server's Service address (before translation).
		kubernetesSvc, err := cluster.client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		apiService = netpolicy.External(netip.MustParseAddr(kubernetesSvc.Spec.ClusterIP))
		apiService.Name = "Service kubernetes " + kubernetesSvc.Spec.ClusterIP
		apiPort = kubernetesSvc.Spec.Ports[0].Port

		// Two real step pods, as the ATC creates them. They run in this
		// suite's namespace but are judged where deploy/'s ATC puts its steps.
		stepA = startStep(ctx, ns, "a", workerNS)
		stepB = startStep(ctx, ns, "b", workerNS)
		Expect(podSubnet.Contains(stepA.IP)).To(BeTrue(), "step pod %s has %s, outside PORTER_CLUSTER_POD_SUBNET %s", stepA, stepA.IP, podSubnet)
		fmt.Fprintf(GinkgoWriter, "rendered deploy/, started two step pods (%s, %s) in %s\n", stepA.IP, stepB.IP, time.Since(start).Round(time.Millisecond))
	}, NodeTimeout(90*time.Second))

	It("are accepted by the API server (server-side dry run), which refuses a broken one", func(ctx SpecContext) {
		served := dryRun(ctx, ns, policiesOf(rendered))
		var names []string
		for _, p := range served {
			names = append(names, p.Namespace+"/"+p.Name)
		}
		Expect(names).To(ConsistOf("porter/porter-steps", "porter/porter-steps-outside", "porter/atc-porter-runtime", "porter/postgres", "porter-minio/minio"))
		Expect(dryRun(ctx, ns, policiesOf(example))).To(HaveLen(2))

		broken := networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "broken"},
			Spec: networkingv1.NetworkPolicySpec{
				Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{
					IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"192.168.0.0/16"}},
				}}}},
			},
		}
		_, err := cluster.client.NetworkingV1().NetworkPolicies(ns).Create(ctx, &broken, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "an except outside its CIDR: want Invalid, got %v", err)
	}, SpecTimeout(30*time.Second))

	It("isolate step pods both ways", func(ctx SpecContext) {
		served := dryRun(ctx, ns, policiesOf(rendered))
		for _, dir := range []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress} {
			for _, step := range []netpolicy.Endpoint{stepA, stepB} {
				names, err := netpolicy.Selecting(served, step, dir)
				Expect(err).NotTo(HaveOccurred())
				Expect(names).To(ContainElement(workerNS+"/porter-steps"), "%s: no policy selects %s (labels %s)", dir, step, step.Labels)
			}
		}
	}, SpecTimeout(30*time.Second))

	It("let steps reach the ATC's gRPC, the blobstore, DNS and the outside world, and nothing else of the cluster", func(ctx SpecContext) {
		served := dryRun(ctx, ns, policiesOf(rendered))
		outside := netpolicy.External(netip.MustParseAddr(outsideIP))
		outside.Name = "outside " + outsideIP
		expectVerdicts(served, namespaces, []connection{
			{"step -> ATC grpc", stepA, atc, portOf(atc, "grpc", ""), "", true},
			{"step -> ATC http", stepA, atc, portOf(atc, "http", ""), "", false},
			{"step -> ATC ops (metrics)", stepA, atc, portOf(atc, "ops", ""), "", false},
			{"step -> ATC's NodePort on the node", stepA, node, 30880, "", false},
			{"step -> PostgreSQL", stepA, pg, portOf(pg, "postgres", ""), "", false},
			{"step -> MinIO", stepA, minio, portOf(minio, "s3", ""), "", true},
			{"step -> DNS (UDP)", stepA, dns, portOf(dns, "dns", corev1.ProtocolUDP), corev1.ProtocolUDP, true},
			{"step -> DNS (TCP)", stepA, dns, portOf(dns, "dns-tcp", corev1.ProtocolTCP), corev1.ProtocolTCP, true},
			{"step -> the local registry", stepA, node, 5000, "", true},
			{"step -> the internet", stepA, outside, 443, "", true},
			{"step -> API server on the node", stepA, node, 6443, "", false},
			{"step -> API server's Service address", stepA, apiService, apiPort, "", false},
			{"step -> kubelet", stepA, node, 10250, "", false},
			{"step (team a) -> step (team b)", stepA, stepB, 8080, "", false},
			{"step (team b) -> step (team a)", stepB, stepA, 8080, "", false},
			{"outside -> step", outside, stepA, 8080, "", false},
			{"fly (outside) -> ATC http", outside, atc, portOf(atc, "http", ""), "", true},
			{"outside -> ATC grpc", outside, atc, portOf(atc, "grpc", ""), "", false},
			{"ATC -> PostgreSQL", atc, pg, portOf(pg, "postgres", ""), "", true},
			{"ATC -> MinIO", atc, minio, portOf(minio, "s3", ""), "", true},
			{"step (team b) -> ATC grpc", stepB, atc, portOf(atc, "grpc", ""), "", true},
		})
	}, SpecTimeout(30*time.Second))

	It("let teams' steps talk once the cross-team example is applied, in its direction only", func(ctx SpecContext) {
		served := dryRun(ctx, ns, slices.Concat(policiesOf(rendered), policiesOf(example)))
		expectVerdicts(served, namespaces, []connection{
			{"step (team a) -> step (team b) on 8080", stepA, stepB, 8080, "", true},
			{"step (team a) -> step (team b) on 8081", stepA, stepB, 8081, "", false},
			{"step (team b) -> step (team a) on 8080", stepB, stepA, 8080, "", false},
			{"step (team a) -> ATC http", stepA, atc, portOf(atc, "http", ""), "", false},
		})
	}, SpecTimeout(30*time.Second))

	// Each team's steps in its own namespace (a worker's team_namespaces,
	// pkg/worker.TeamNamespace): the objects the API server accepts, under
	// which no team's step reaches another team's, and a team's steps reach
	// what the worker's own steps reach.
	It("keep team namespaces apart: a team's steps accept connections from their own namespace only", func(ctx SpecContext) {
		deployed := dryRun(ctx, ns, policiesOf(rendered))
		team := slices.Clone(deployed)
		teamNamespaces := maps.Clone(namespaces)
		steps := map[string]netpolicy.Endpoint{}
		for name, step := range map[string]netpolicy.Endpoint{"a": stepA, "b": stepB} {
			tn := worker.TeamNamespace{Worker: inClusterWorker, Team: name, Namespace: "porter-steps-" + name,
				ATC: worker.SubjectOf("system:serviceaccount:" + workerNS + ":atc-porter-runtime")}
			namespace, binding, policy, err := tn.Objects()
			Expect(err).NotTo(HaveOccurred())
			dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
			_, err = cluster.client.CoreV1().Namespaces().Create(ctx, namespace, dry)
			Expect(err).NotTo(HaveOccurred(), "dry run of Namespace %s", namespace.Name)
			b := binding.DeepCopy()
			b.Namespace = ns
			_, err = cluster.client.RbacV1().RoleBindings(ns).Create(ctx, b, dry)
			Expect(err).NotTo(HaveOccurred(), "dry run of RoleBinding %s", binding.Name)
			copies := []networkingv1.NetworkPolicy{*policy}
			for _, p := range tn.StepEgress(deployed, workerNS) {
				copies = append(copies, *p)
			}
			team = append(team, dryRun(ctx, ns, copies)...)
			teamNamespaces[namespace.Name] = namespace.Labels
			step.Namespace = namespace.Name
			steps[name] = step
		}
		sibling := steps["a"]
		sibling.Name, sibling.IP = "another step of team a", nthFromTop(netip.MustParsePrefix(cluster.env["PORTER_CLUSTER_POD_SUBNET"]), 4)
		outside := netpolicy.External(netip.MustParseAddr(outsideIP))
		expectVerdicts(team, teamNamespaces, []connection{
			{"step (team a) -> step (team b)", steps["a"], steps["b"], 8080, "", false},
			{"step (team b) -> step (team a)", steps["b"], steps["a"], 8080, "", false},
			// deploy/'s step egress (copied) lets no step reach another,
			// as in the worker's own namespace.
			{"step (team a) -> step (team a)", sibling, steps["a"], 8080, "", false},
			{"outside -> step (team a)", outside, steps["a"], 8080, "", false},
			{"step (team a) -> ATC grpc", steps["a"], atc, portOf(atc, "grpc", ""), "", true},
			{"step (team a) -> ATC http", steps["a"], atc, portOf(atc, "http", ""), "", false},
			{"step (team a) -> PostgreSQL", steps["a"], pg, portOf(pg, "postgres", ""), "", false},
			{"step (team a) -> kubelet", steps["a"], node, 10250, "", false},
		})
	}, SpecTimeout(30*time.Second))
})

// connection is one expectation: whether from may open to:port.
type connection struct {
	what     string
	from, to netpolicy.Endpoint
	port     int32
	proto    corev1.Protocol
	allowed  bool
}

// expectVerdicts evaluates every connection and fails with all the wrong
// ones at once, each with the evaluator's reason.
func expectVerdicts(policies []networkingv1.NetworkPolicy, namespaces map[string]labels.Set, conns []connection) {
	GinkgoHelper()
	var wrong []string
	for _, c := range conns {
		v, err := netpolicy.Evaluate(policies, namespaces, netpolicy.Connection{From: c.from, To: c.to, Port: c.port, Protocol: c.proto})
		Expect(err).NotTo(HaveOccurred(), c.what)
		fmt.Fprintf(GinkgoWriter, "%-40s port %5d: allowed=%-5v %s\n", c.what, c.port, v.Allowed, v.Reason)
		if v.Allowed != c.allowed {
			wrong = append(wrong, fmt.Sprintf("%s (port %d): allowed=%v, want %v: %s", c.what, c.port, v.Allowed, c.allowed, v.Reason))
		}
	}
	Expect(wrong).To(BeEmpty())
}

// render runs `kubectl kustomize dir` (relative to the repository) and
// decodes what it prints.
func render(ctx context.Context, dir string) []runtime.Object {
	GinkgoHelper()
	cmd := exec.CommandContext(ctx, cluster.kubectl, "kustomize", filepath.Join(cluster.root, dir))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	Expect(err).NotTo(HaveOccurred(), "kubectl kustomize %s: %s", dir, stderr.String())
	path := filepath.Join(GinkgoT().TempDir(), "rendered.yaml")
	Expect(os.WriteFile(path, out, 0o600)).To(Succeed())
	objs, err := testenv.DecodeManifests(path)
	Expect(err).NotTo(HaveOccurred(), "decoding kubectl kustomize %s", dir)
	return objs
}

// find is the object of type T called name.
func find[T runtime.Object](objs []runtime.Object, name string) T {
	GinkgoHelper()
	for _, obj := range objs {
		if t, ok := obj.(T); ok {
			if m, err := meta.Accessor(t); err == nil && m.GetName() == name {
				return t
			}
		}
	}
	var zero T
	Fail(fmt.Sprintf("no %T %q in the rendered manifests", zero, name))
	return zero
}

func policiesOf(objs []runtime.Object) []networkingv1.NetworkPolicy {
	var ps []networkingv1.NetworkPolicy
	for _, obj := range objs {
		if p, ok := obj.(*networkingv1.NetworkPolicy); ok {
			ps = append(ps, *p)
		}
	}
	return ps
}

// dryRun creates each policy in namespace ns with a server-side dry run
// (validation, defaulting, admission; nothing stored) and returns what the
// API server would have stored, back in the policy's own namespace.
func dryRun(ctx context.Context, ns string, policies []networkingv1.NetworkPolicy) []networkingv1.NetworkPolicy {
	GinkgoHelper()
	var served []networkingv1.NetworkPolicy
	for _, p := range policies {
		in := p.DeepCopy()
		in.Namespace = ns
		out, err := cluster.client.NetworkingV1().NetworkPolicies(ns).Create(ctx, in, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		Expect(err).NotTo(HaveOccurred(), "dry run of NetworkPolicy %s/%s", p.Namespace, p.Name)
		out.Namespace = p.Namespace
		served = append(served, *out)
	}
	return served
}

// templateEndpoint is the pod a workload's template makes: in namespace ns
// at ip, or on the node's address if it uses the host network.
func templateEndpoint(ns, name string, tpl corev1.PodTemplateSpec, ip, nodeIP netip.Addr) netpolicy.Endpoint {
	GinkgoHelper()
	pod := &corev1.Pod{ObjectMeta: *tpl.ObjectMeta.DeepCopy(), Spec: *tpl.Spec.DeepCopy()}
	pod.Namespace, pod.Name = ns, name
	ep, err := netpolicy.PodEndpoint(pod)
	Expect(err).NotTo(HaveOccurred())
	ep.IP = ip
	if pod.Spec.HostNetwork {
		ep.IP = nodeIP
	}
	return ep
}

// nthFromTop is the n-th address below the subnet's broadcast address.
func nthFromTop(subnet netip.Prefix, n uint32) netip.Addr {
	GinkgoHelper()
	Expect(subnet.Addr().Is4()).To(BeTrue(), "pod subnet %s", subnet)
	a := subnet.Masked().Addr().As4()
	top := binary.BigEndian.Uint32(a[:]) | (uint32(1)<<(32-subnet.Bits()) - 1)
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], top-n)
	return netip.AddrFrom4(b)
}

// portOf is the number of the endpoint's container port called name.
func portOf(ep netpolicy.Endpoint, name string, proto corev1.Protocol) int32 {
	GinkgoHelper()
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	for _, p := range ep.Ports {
		if p.Name == name && (p.Protocol == proto || p.Protocol == "" && proto == corev1.ProtocolTCP) {
			return p.ContainerPort
		}
	}
	Fail(fmt.Sprintf("%s has no %s port %q (ports %v)", ep, proto, name, ep.Ports))
	return 0
}

// startStep creates a step pod of team as the ATC would (podspec.Build,
// Secret first), waits for its address and returns it as the API server
// has it, judged as a pod of workerNS.
func startStep(ctx context.Context, ns, team, workerNS string) netpolicy.Endpoint {
	GinkgoHelper()
	i := slices.IndexFunc(podspec.GoldenCases(), func(c podspec.Case) bool { return c.Name == "minimal" })
	Expect(i).To(BeNumerically(">=", 0), "podspec's golden case minimal")
	c := podspec.GoldenCases()[i]
	c.Action.StepID = "netpol-" + team + "-" + strings.ToLower(rand.Text()[:8])
	c.Action.Build.Team = team
	c.Action.Image = "busybox"
	c.Worker.Name = inClusterWorker
	c.Worker.Namespace = ns
	c.Worker.PorterImage = porterImage
	// Only the pod's address is needed, which it has before any image.
	c.Worker.ImagePullPolicy = corev1.PullNever
	pod, secret, err := podspec.Build(c.Action, c.Worker, c.Secrets)
	Expect(err).NotTo(HaveOccurred())
	_, err = cluster.client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating the step's Secret")
	_, err = cluster.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "creating the step's pod")

	var got *corev1.Pod
	Eventually(ctx, func(g Gomega) {
		got, err = cluster.client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Status.PodIP).NotTo(BeEmpty(), "pod %s has no address yet (phase %s)", pod.Name, got.Status.Phase)
	}).WithPolling(250 * time.Millisecond).WithTimeout(45 * time.Second).Should(Succeed())
	ep, err := netpolicy.PodEndpoint(got)
	Expect(err).NotTo(HaveOccurred())
	ep.Namespace = workerNS
	ep.Name = fmt.Sprintf("step pod of team %s (%s)", team, got.Name)
	return ep
}
