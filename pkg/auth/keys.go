package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// SecretKeyField is the data key of the signing key in its Secret.
const SecretKeyField = "signing-key.pem"

// LoadOrCreateKeyFile reads the PEM signing key at path, creating an Ed25519
// key there first if there is none. Keeping the key across restarts keeps
// issued tokens valid.
func LoadOrCreateKeyFile(path string) (crypto.Signer, error) {
	key, err := readKeyFile(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}

	key, pemBytes, err := newKey()
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create signing key directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".signing-key-*") // mode 0600
	if err != nil {
		return nil, fmt.Errorf("create signing key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(pemBytes); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write signing key: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write signing key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("write signing key: %w", err)
	}
	// A hard link publishes the complete file atomically like a rename does, but
	// fails instead of replacing a key another process has just created, so two
	// servers starting together end up with the same key.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readKeyFile(path)
		}
		return nil, fmt.Errorf("save signing key: %w", err)
	}
	return key, nil
}

func readKeyFile(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read signing key: %w", err)
	}
	key, err := parseKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("read signing key %s: %w", path, err)
	}
	return key, nil
}

// LoadOrCreateKeySecret reads the signing key from the Secret namespace/name,
// creating the Secret with a new Ed25519 key first if there is none. When
// several servers start at once, the first to create it wins and the others
// read its key.
func LoadOrCreateKeySecret(ctx context.Context, kube kubernetes.Interface, namespace, name string) (crypto.Signer, error) {
	secrets := kube.CoreV1().Secrets(namespace)
	secret, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return keyFromSecret(secret)
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("get signing key secret %s/%s: %w", namespace, name, err)
	}

	key, pemBytes, err := newKey()
	if err != nil {
		return nil, err
	}
	_, err = secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels:    map[string]string{"app.kubernetes.io/managed-by": "porter"},
		},
		Type:      corev1.SecretTypeOpaque,
		Immutable: new(true), // a changed key would log everyone out
		Data:      map[string][]byte{SecretKeyField: pemBytes},
	}, metav1.CreateOptions{})
	if err == nil {
		return key, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create signing key secret %s/%s: %w", namespace, name, err)
	}
	secret, err = secrets.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get signing key secret %s/%s after losing the race to create it: %w", namespace, name, err)
	}
	return keyFromSecret(secret)
}

func keyFromSecret(secret *corev1.Secret) (crypto.Signer, error) {
	data, ok := secret.Data[SecretKeyField]
	if !ok {
		return nil, fmt.Errorf("signing key secret %s/%s has no %q", secret.Namespace, secret.Name, SecretKeyField)
	}
	key, err := parseKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("signing key secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	return key, nil
}

// newKey makes an Ed25519 key and its PKCS #8 PEM encoding.
func newKey() (crypto.Signer, []byte, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate signing key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode signing key: %w", err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseKeyPEM accepts the key types the Issuer can sign with: Ed25519, or ECDSA
// P-256 for operators who bring their own key.
func parseKeyPEM(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unsupported PEM block %q", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	switch k := key.(type) {
	case ed25519.PrivateKey:
		return k, nil
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("ECDSA key on %s, want P-256", k.Curve.Params().Name)
		}
		return k, nil
	default:
		return nil, fmt.Errorf("unsupported key type %T, want Ed25519 or ECDSA P-256", key)
	}
}
