package kuberuntime

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/stepcreds"
	"github.com/porter-ci/porter/pkg/steptoken"
	"github.com/porter-ci/porter/pkg/worker"
)

// audits records what the runtime writes to the audit trail.
type audits map[string][]byte

func (a audits) Put(_ context.Context, key string, body io.Reader, _ int64, _ blobstore.PutOptions) (blobstore.ObjectInfo, error) {
	b, err := io.ReadAll(body)
	a[key] = b
	return blobstore.ObjectInfo{Key: key}, err
}

// scopes records the scopes step credentials are issued for.
type scopes struct{ got []stepcreds.Scope }

func (s *scopes) Issue(_ context.Context, sc stepcreds.Scope) (stepcreds.Credentials, error) {
	s.got = append(s.got, sc)
	return stepcreds.Credentials{AccessKey: "AK-" + sc.StepID, SecretKey: "SK"}, nil
}

func newTestRuntime(t *testing.T, kube kubernetes.Interface, workers ...worker.Config) (*Runtime, audits, *scopes) {
	t.Helper()
	key, err := steptoken.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := steptoken.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	a, sc := audits{}, &scopes{}
	r, err := New(Config{Workers: workers, Pod: podspec.GoldenCases()[0].Worker},
		Deps{Log: slog.New(slog.DiscardHandler), Client: func(worker.Config) (kubernetes.Interface, error) { return kube, nil },
			Tokens: keys, Credentials: sc, Audit: a})
	if err != nil {
		t.Fatal(err)
	}
	return r, a, sc
}

func TestWorkerByName(t *testing.T) {
	r, _, _ := newTestRuntime(t, fake.NewSimpleClientset(),
		worker.Config{Name: "a", Namespace: "steps-a", Platform: worker.PlatformLinux},
		worker.Config{Name: "b", Namespace: "steps-b", Platform: worker.PlatformLinux})
	if w, err := r.Worker(""); err != nil || w.Name() != "a" {
		t.Errorf(`Worker("") = %v, %v; want the first, a`, w, err)
	}
	if w, err := r.Worker("b"); err != nil || w.Namespace() != "steps-b" {
		t.Errorf(`Worker("b") = %v, %v; want b in steps-b`, w, err)
	}
	if _, err := r.Worker("c"); err == nil || !strings.Contains(err.Error(), `"c"`) {
		t.Errorf(`Worker("c") error = %v, want one naming c`, err)
	}
}

func TestCheckPlacementRefusesWhatNoWorkerCouldRun(t *testing.T) {
	r, _, _ := newTestRuntime(t, fake.NewSimpleClientset(),
		worker.Config{Name: "a", Namespace: "steps-a", Platform: worker.PlatformLinux})
	if err := r.CheckPlacement(worker.Requirements{Platform: worker.PlatformLinux}); err != nil {
		t.Errorf("a linux step: %v", err)
	}
	if err := r.CheckPlacement(worker.Requirements{Platform: worker.PlatformLinux, Privileged: true}); err == nil {
		t.Error("a privileged step on a worker that does not allow it was accepted")
	}
	if err := r.CheckPlacement(worker.Requirements{Platform: worker.PlatformLinux, Tags: []string{"gpu"}}); err == nil {
		t.Error("a step tagged gpu was accepted with no gpu worker")
	}
}

func TestCreatePod(t *testing.T) {
	kube := fake.NewSimpleClientset()
	// The API server gives a created pod its UID, which the Secrets' owner
	// reference names; the fake gives none.
	kube.PrependReactor("create", "pods", func(act k8stesting.Action) (bool, runtime.Object, error) {
		act.(k8stesting.CreateAction).GetObject().(*corev1.Pod).UID = "pod-uid"
		return false, nil, nil
	})
	r, audit, issued := newTestRuntime(t, kube, worker.Config{Name: "a", Namespace: "steps", Platform: worker.PlatformLinux})
	w, _ := r.Worker("a")
	c := podspec.GoldenCases()[1] // with inputs
	a := c.Action
	a.Timeout, a.KeepAlive = action.Duration{Duration: 10 * time.Minute}, action.Duration{Duration: 5 * time.Minute}
	ctx := context.Background()
	if err := r.CreatePod(ctx, w, a, podspec.Secrets{ImagePull: &podspec.RegistryAuth{Username: "u", Password: "p"}}); err != nil {
		t.Fatal(err)
	}
	pod, err := kube.CoreV1().Pods("steps").Get(ctx, podspec.Name(a.StepID), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the step's pod: %v", err)
	}
	secrets, err := kube.CoreV1().Secrets("steps").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 2 {
		t.Errorf("%d secrets, want the step's and its pull secret", len(secrets.Items))
	}
	for _, s := range secrets.Items {
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != pod.UID {
			t.Errorf("secret %s owners = %v, want the pod %s", s.Name, s.OwnerReferences, pod.Name)
		}
	}
	// An optional input nobody gave has no key to read.
	keyed := 0
	for _, in := range a.Inputs {
		if in.Key != "" {
			keyed++
		}
	}
	if len(issued.got) != 1 || len(issued.got[0].Inputs) != keyed || issued.got[0].StepID != a.StepID {
		t.Fatalf("credentials issued for %+v, want one scope of step %s with its %d keyed inputs", issued.got, a.StepID, keyed)
	}
	allowance := podspec.DefaultUploadAllowance
	if w.spec.UploadAllowance > 0 {
		allowance = w.spec.UploadAllowance
	}
	if got, want := issued.got[0].Lifetime, 15*time.Minute+allowance; got != want {
		t.Errorf("credentials' lifetime = %s, want timeout + upload allowance + keep-alive = %s", got, want)
	}
	key := blobstore.StepPrefix(a.Build.ID, a.StepID) + blobstore.PodObject
	if !strings.Contains(string(audit[key]), "name: "+pod.Name) {
		t.Errorf("audit %s = %q, want the declared pod", key, audit[key])
	}
}

func TestCreatePodUndoesItsSecretsWhenThePodIsRefused(t *testing.T) {
	kube := fake.NewSimpleClientset()
	kube.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("quota exceeded")
	})
	r, _, _ := newTestRuntime(t, kube, worker.Config{Name: "a", Namespace: "steps", Platform: worker.PlatformLinux})
	w, _ := r.Worker("a")
	ctx := context.Background()
	err := r.CreatePod(ctx, w, podspec.GoldenCases()[0].Action, podspec.Secrets{})
	if err == nil || !strings.Contains(err.Error(), "quota exceeded") {
		t.Fatalf("CreatePod error = %v, want the API server's refusal", err)
	}
	secrets, _ := kube.CoreV1().Secrets("steps").List(ctx, metav1.ListOptions{})
	if len(secrets.Items) != 0 {
		t.Errorf("%d secrets left behind, want none", len(secrets.Items))
	}
}

func TestPodGoneRemovesALeftSecret(t *testing.T) {
	kube := fake.NewSimpleClientset()
	r, _, _ := newTestRuntime(t, kube, worker.Config{Name: "a", Namespace: "steps", Platform: worker.PlatformLinux})
	w, _ := r.Worker("a")
	ctx := context.Background()
	a := podspec.GoldenCases()[0].Action
	if err := r.CreatePod(ctx, w, a, podspec.Secrets{}); err != nil {
		t.Fatal(err)
	}
	if gone, err := r.PodGone(ctx, w, a.StepID); err != nil || gone {
		t.Fatalf("PodGone of a running pod = %v, %v", gone, err)
	}
	r.DeletePod(ctx, w, a.StepID) // the fake has no garbage collector: the Secret stays
	if gone, err := r.PodGone(ctx, w, a.StepID); err != nil || !gone {
		t.Fatalf("PodGone of a deleted pod = %v, %v", gone, err)
	}
	secrets, _ := kube.CoreV1().Secrets("steps").List(ctx, metav1.ListOptions{})
	if len(secrets.Items) != 0 {
		t.Errorf("%d secrets left behind a gone pod, want none", len(secrets.Items))
	}
}
