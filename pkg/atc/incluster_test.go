package atc

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/porter-ci/porter/test/testenv"
)

// realKube is the local cluster's admin client and a namespace of its own,
// deleted when the test ends. Without a cluster the test skips (fails in CI).
func realKube(t *testing.T) (kubernetes.Interface, string) {
	t.Helper()
	cfg, err := testenv.AdminConfig(t.Context(), testenv.KubeconfigPath())
	if errors.Is(err, testenv.ErrNoCluster) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// A transport of the test's own (client-go shares one per config
	// otherwise, whose connections outlive the test), closed when it ends.
	cfg.Dial = (&net.Dialer{}).DialContext
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	kube, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "porter-incluster-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return kube, ns.Name
}

// Two replicas against the real API server: exactly one runs the loop at a
// time, and when the leader stops the other takes over, promptly, because
// the Lease is released rather than left to expire.
func TestWhileLeadingHandsOverBetweenReplicas(t *testing.T) {
	kube, ns := realKube(t)
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	var running, maxRunning atomic.Int32
	leader := make(chan string, 4)
	loop := func(id string) func(context.Context) {
		return func(ctx context.Context) {
			n := running.Add(1)
			for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
			}
			leader <- id
			<-ctx.Done()
			running.Add(-1)
		}
	}
	cancels := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	for _, id := range []string{"atc-a", "atc-b"} {
		s := &Server{log: log, kube: kube, cfg: Config{ServerID: id, InClusterConfig: InClusterConfig{
			LeaderElectionNamespace: ns, LeaderElectionName: "test", LeaseDuration: 6 * time.Second}}}
		ctx, cancel := context.WithCancel(t.Context())
		cancels[id] = cancel
		wg.Go(func() { s.whileLeading(ctx, "loop", loop(id)) })
	}
	t.Cleanup(func() {
		for _, c := range cancels {
			c()
		}
		wg.Wait()
	})

	var first string
	select {
	case first = <-leader:
	case <-time.After(20 * time.Second):
		t.Fatal("no replica started leading")
	}
	lease, err := kube.CoordinationV1().Leases(ns).Get(t.Context(), "test-loop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != first {
		t.Fatalf("Lease test-loop held by %v, want %s", lease.Spec.HolderIdentity, first)
	}
	time.Sleep(2 * time.Second) // the other replica is trying meanwhile
	if n := maxRunning.Load(); n != 1 {
		t.Fatalf("%d replicas ran the loop at once", n)
	}

	start := time.Now()
	cancels[first]()
	select {
	case second := <-leader:
		if second == first {
			t.Fatalf("%s led again after it stopped", first)
		}
		// Well under the 6s lease: released, not expired.
		t.Logf("%s took over %s after %s stopped", second, time.Since(start).Round(time.Millisecond), first)
		if time.Since(start) > 5*time.Second {
			t.Fatalf("handover took %s: the Lease was not released", time.Since(start))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the other replica did not take over")
	}
	if n := maxRunning.Load(); n != 1 {
		t.Fatalf("%d replicas ran the loop at once", n)
	}
}

// The key Secrets against the real API server: replicas starting together
// end up with one key; a hand-made Secret that lacks a key is an error, not
// a silent new key.
func TestKeySecretsSharedByReplicas(t *testing.T) {
	kube, ns := realKube(t)
	cfg := Config{Namespace: ns, InClusterConfig: InClusterConfig{StepTokenKeySecret: "step-key"}}
	keys := make([][]byte, 4)
	var wg sync.WaitGroup
	errs := make([]error, len(keys))
	for i := range keys {
		wg.Go(func() { keys[i], errs[i] = stepTokenKey(t.Context(), cfg, kube) })
	}
	wg.Wait()
	for i := range keys {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if len(keys[i]) == 0 || !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("replica %d got another step token key", i)
		}
	}
	sec, err := kube.CoreV1().Secrets(ns).Get(t.Context(), "step-key", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sec.Immutable == nil || !*sec.Immutable {
		t.Fatal("the key Secret is mutable")
	}

	if _, err := kube.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "ca"}, Data: map[string][]byte{"ca.crt": []byte("x")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := &Server{log: slog.New(slog.DiscardHandler), kube: kube, cfg: Config{Namespace: ns, InClusterConfig: InClusterConfig{CASecret: "ca"}}}
	if _, _, err := s.newGRPCTLS(t.Context(), "10.244.0.9"); err == nil {
		t.Fatal("a CA Secret without ca.key was accepted")
	}
}
