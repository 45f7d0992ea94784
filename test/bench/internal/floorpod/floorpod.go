// Package floorpod is the kubelet's floor for a Porter step: pods of the
// shape podspec.Build makes, created with client-go, no Porter server
// involved.
package floorpod

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/bench/internal/benchstat"
)

// Run is the kubelet's floor for one step: the pod podspec.Build makes
// for a `true` task, with the images of a pod Porter just ran (so both are
// pulled) and the settings the bench server gives its worker: the same
// volumes, native sidecar and postStart hook as Porter's. It is created
// with client-go, its Secret first as Porter does, and timed until its step
// container runs. No Porter server is involved: the sidecar dials an
// address nobody answers, so the step's process never starts, and the pod
// is deleted at once.
func Run(ctx context.Context, kube kubernetes.Interface, ns string, i int, stepImage, porterImage string) (time.Duration, error) {
	id := fmt.Sprintf("floor-%d-%d", i, time.Now().UnixNano()%1e6)
	a := &action.Action{StepID: id, Build: action.Build{ID: "floor", Name: "1", Team: "main"}, StepName: "one-off",
		Type: action.KindTask, Image: stepImage, Run: action.Run{Path: "true"}, WorkDir: "/tmp/build/" + id}
	w := podspec.Worker{Name: "floor", Namespace: ns, PorterImage: porterImage, ATCAddress: "127.0.0.1:9",
		BlobstoreEndpoint: "127.0.0.1:9", BlobstoreBucket: "porter", NativeSidecars: true,
		ImagePullPolicy: corev1.PullIfNotPresent, DNSPolicy: corev1.DNSDefault}
	ca, err := throwawayCA()
	if err != nil {
		return 0, err
	}
	pod, secret, err := podspec.Build(a, w, podspec.Secrets{StepToken: "floor", ATCCA: ca, BlobstoreAccessKey: "floor", BlobstoreSecretKey: "floor"})
	if err != nil {
		return 0, fmt.Errorf("floor pod: %w", err)
	}
	pods, secrets := kube.CoreV1().Pods(ns), kube.CoreV1().Secrets(ns)
	defer func() {
		del := context.WithoutCancel(ctx)
		grace := int64(0)
		_ = pods.Delete(del, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		_ = secrets.Delete(del, secret.Name, metav1.DeleteOptions{})
	}()
	start := time.Now()
	if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return 0, fmt.Errorf("floor pod's Secret: %w", err)
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return 0, fmt.Errorf("floor pod: %w", err)
	}
	err = benchstat.WaitForPod(ctx, kube, ns, pod.Name, 2*time.Minute, func(p *corev1.Pod) (bool, error) {
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("floor pod %s failed: %s", p.Name, p.Status.Message)
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == podspec.StepContainerName && c.State.Running != nil {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return 0, fmt.Errorf("floor pod %s: %w (%s)", pod.Name, err, podState(context.WithoutCancel(ctx), pods, pod.Name))
	}
	return time.Since(start), nil
}

// throwawayCA is a CA certificate nobody holds a key of: the sidecar wants
// one to dial the ATC with TLS, and finds no server to check it against.
func throwawayCA() ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "floor"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("floor pod's CA: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// podState says where a pod got to: its phase and each container's state.
func podState(ctx context.Context, pods interface {
	Get(context.Context, string, metav1.GetOptions) (*corev1.Pod, error)
}, name string) string {
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	out := fmt.Sprintf("phase %s %s", p.Status.Phase, p.Status.Message)
	for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		switch {
		case c.State.Waiting != nil:
			out += fmt.Sprintf("; %s waiting: %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Terminated != nil:
			out += fmt.Sprintf("; %s terminated: %s exit %d", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode)
		case c.State.Running != nil:
			out += fmt.Sprintf("; %s running", c.Name)
		}
	}
	return out
}

// Throughput is the kubelet's floor for a serial job whose pods are
// declared ahead: n floor pods (Run), at most inFlight at once, as a
// lookahead keeps them; it returns the wall time per pod.
func Throughput(ctx context.Context, kube kubernetes.Interface, ns string, n, inFlight int, stepImage, porterImage string) (time.Duration, error) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(inFlight)
	start := time.Now()
	for i := range n {
		g.Go(func() error {
			_, err := Run(gctx, kube, ns, i, stepImage, porterImage)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return time.Since(start) / time.Duration(n), nil
}

// Images are the step's and the sidecar's images of a pod Porter ran.
func Images(pod *corev1.Pod) (step, porter string) {
	for _, c := range pod.Spec.Containers {
		if c.Name == podspec.StepContainerName {
			step = c.Image
		}
	}
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if c.Name == podspec.SidecarContainerName {
			porter = c.Image
		}
	}
	return step, porter
}
