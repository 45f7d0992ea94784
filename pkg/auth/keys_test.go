package auth

import (
	"context"
	"crypto"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestKeyFilePersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "signing-key.pem")

	first, err := LoadOrCreateKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("key file mode = %o, want 600", mode)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("state dir holds %d entries, want only the key (temp file left behind?)", len(entries))
	}

	// A restarted server verifies tokens its predecessor issued.
	token, err := NewIssuer(first, testIssuerURL, time.Hour).Issue(testClaims())
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadOrCreateKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewIssuer(again, testIssuerURL, time.Hour).Verify(token); err != nil {
		t.Fatalf("reloaded key does not verify: %v", err)
	}
}

func TestKeyFileConcurrentCreatorsAgree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "signing-key.pem")
	const n = 8
	keys := make([]crypto.Signer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			k, err := LoadOrCreateKeyFile(path)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	for i, k := range keys[1:] {
		if k == nil || !samePublicKey(keys[0], k) {
			t.Fatalf("creator %d got a different key", i+1)
		}
	}
}

func TestKeyFileRefusesGarbage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "signing-key.pem")
	if err := os.WriteFile(path, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKeyFile(path); err == nil {
		t.Fatal("loaded a garbage key file")
	}
	// And it must not have replaced it.
	if b, _ := os.ReadFile(path); string(b) != "not a key" {
		t.Fatal("garbage key file was overwritten")
	}
}

func TestKeySecret(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()

	first, err := LoadOrCreateKeySecret(ctx, kube, "porter", "porter-signing-key")
	if err != nil {
		t.Fatal(err)
	}
	secret, err := kube.CoreV1().Secrets("porter").Get(ctx, "porter-signing-key", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("secret not created: %v", err)
	}
	if len(secret.Data[SecretKeyField]) == 0 {
		t.Fatalf("secret has no %s", SecretKeyField)
	}
	again, err := LoadOrCreateKeySecret(ctx, kube, "porter", "porter-signing-key")
	if err != nil {
		t.Fatal(err)
	}
	if !samePublicKey(first, again) {
		t.Fatal("second load made a new key")
	}
}

func TestKeySecretLostRace(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()

	// Another server creates the Secret between our Get and our Create.
	winner, winnerPEM, err := newKey()
	if err != nil {
		t.Fatal(err)
	}
	kube.PrependReactor("create", "secrets", func(action k8stesting.Action) (bool, runtime.Object, error) {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "k", Namespace: "porter"},
			Data:       map[string][]byte{SecretKeyField: winnerPEM},
		}
		if err := kube.Tracker().Add(s); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewAlreadyExists(corev1.Resource("secrets"), "k")
	})

	got, err := LoadOrCreateKeySecret(ctx, kube, "porter", "k")
	if err != nil {
		t.Fatal(err)
	}
	if !samePublicKey(got, winner) {
		t.Fatal("loser of the race kept its own key")
	}
}

func samePublicKey(a, b crypto.Signer) bool {
	return a.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(b.Public())
}
