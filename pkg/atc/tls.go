package atc

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/porter-ci/porter/pkg/steptoken"
)

// DefaultGRPCCertLifetime is how long an issued gRPC server certificate is
// valid; it is re-issued from the CA after two thirds of that.
const DefaultGRPCCertLifetime = 30 * 24 * time.Hour

// Keys of the Secrets that hold the ATC's CA and step token key.
const (
	secretCACert       = "ca.crt"
	secretCAKey        = "ca.key"
	secretStepTokenKey = "step-token.key"
)

// newGRPCTLS is the gRPC endpoint's TLS configuration: the CA (from the state
// directory or a Secret, created on first use) and a server certificate
// issued from it for host and cfg.GRPCCertHosts, renewed before it expires
// without a restart. Sidecars get the CA through their step's Secret, so no
// public PKI is needed.
func (s *Server) newGRPCTLS(ctx context.Context, host string) (*tls.Config, []byte, error) {
	var caCertPEM, caKeyPEM []byte
	var err error
	if s.cfg.CASecret != "" {
		var data map[string][]byte
		data, err = loadOrCreateSecret(ctx, s.kube, s.cfg.KeyNamespace(), s.cfg.CASecret, func() (map[string][]byte, error) {
			c, k, err := newCA()
			return map[string][]byte{secretCACert: c, secretCAKey: k}, err
		})
		caCertPEM, caKeyPEM = data[secretCACert], data[secretCAKey]
	} else {
		caCertPEM, caKeyPEM, err = caFromDir(s.cfg.StateDir)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("ATC CA: %w", err)
	}
	iss, err := newCertIssuer(caCertPEM, caKeyPEM, append([]string{host}, s.cfg.GRPCCertHosts...), s.cfg.GRPCCertLifetime, s.log)
	if err != nil {
		return nil, nil, err
	}
	// Issue the first certificate now, so a broken CA fails the start.
	if _, err := iss.GetCertificate(nil); err != nil {
		return nil, nil, err
	}
	return &tls.Config{GetCertificate: iss.GetCertificate, MinVersion: tls.VersionTLS12}, caCertPEM, nil
}

// KeyNamespace is where the key Secrets (and --signing-key-secret's) are.
func (c Config) KeyNamespace() string {
	if c.SecretNamespace != "" {
		return c.SecretNamespace
	}
	return c.Namespace
}

// stepTokenKey loads the key step tokens are signed with, from a Secret when
// cfg.StepTokenKeySecret is set and from the state directory otherwise,
// creating it on first use: it must outlive restarts (and be shared by
// replicas), or running steps could not reconnect.
func stepTokenKey(ctx context.Context, cfg Config, kube kubernetes.Interface) ([]byte, error) {
	if cfg.StepTokenKeySecret == "" {
		return tokenKey(cfg.StateDir, steptoken.NewKey)
	}
	data, err := loadOrCreateSecret(ctx, kube, cfg.KeyNamespace(), cfg.StepTokenKeySecret, func() (map[string][]byte, error) {
		key, err := steptoken.NewKey()
		return map[string][]byte{secretStepTokenKey: key}, err
	})
	if err != nil {
		return nil, fmt.Errorf("step token key: %w", err)
	}
	return data[secretStepTokenKey], nil
}

// loadOrCreateSecret returns the data of Secret namespace/name, creating it
// (immutable) from generate first if there is none. When several replicas
// start at once, the first to create it wins and the others read its data.
// Every key generate returns must be present, so a hand-made Secret missing
// one is an error rather than a silent new key.
func loadOrCreateSecret(ctx context.Context, kube kubernetes.Interface, namespace, name string, generate func() (map[string][]byte, error)) (map[string][]byte, error) {
	secrets := kube.CoreV1().Secrets(namespace)
	want, err := generate()
	if err != nil {
		return nil, fmt.Errorf("generate the data of Secret %s/%s: %w", namespace, name, err)
	}
	check := func(sec *corev1.Secret) (map[string][]byte, error) {
		for k := range want {
			if len(sec.Data[k]) == 0 {
				return nil, fmt.Errorf("secret %s/%s has no %q", namespace, name, k)
			}
		}
		return sec.Data, nil
	}
	sec, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return check(sec)
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("get Secret %s/%s: %w", namespace, name, err)
	}
	_, err = secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "porter"}},
		Type:      corev1.SecretTypeOpaque,
		Immutable: new(true), // a changed key or CA would cut off running steps
		Data:      want,
	}, metav1.CreateOptions{})
	if err == nil {
		return want, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create Secret %s/%s: %w", namespace, name, err)
	}
	if sec, err = secrets.Get(ctx, name, metav1.GetOptions{}); err != nil {
		return nil, fmt.Errorf("get Secret %s/%s after losing the race to create it: %w", namespace, name, err)
	}
	return check(sec)
}

// caFromDir reads the CA from dir, creating it on first use.
func caFromDir(dir string) (certPEM, keyPEM []byte, err error) {
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if _, err := os.Stat(certPath); errors.Is(err, os.ErrNotExist) {
		c, k, err := newCA()
		if err != nil {
			return nil, nil, err
		}
		if err := os.WriteFile(keyPath, k, 0o600); err != nil {
			return nil, nil, fmt.Errorf("write CA key: %w", err)
		}
		if err := os.WriteFile(certPath, c, 0o644); err != nil {
			return nil, nil, fmt.Errorf("write CA certificate: %w", err)
		}
	}
	if certPEM, err = os.ReadFile(certPath); err != nil {
		return nil, nil, fmt.Errorf("read CA certificate: %w", err)
	}
	if keyPEM, err = os.ReadFile(keyPath); err != nil {
		return nil, nil, fmt.Errorf("read CA key: %w", err)
	}
	return certPEM, keyPEM, nil
}

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// newCA makes a ten-year CA and returns its certificate and key as PEM.
func newCA() (certPEM, keyPEM []byte, err error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "porter ATC CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// certIssuer issues the gRPC server certificate from the CA and issues a
// new one once two thirds of the current one's lifetime have passed, so a
// long-running ATC never serves an expired certificate. Connections already
// open keep the certificate they were made with; new ones get the new one.
type certIssuer struct {
	ca       *x509.Certificate
	caKey    crypto.Signer
	hosts    []string
	lifetime time.Duration
	log      *slog.Logger
	now      func() time.Time

	mu      sync.Mutex
	cur     *tls.Certificate
	renewAt time.Time
}

func newCertIssuer(caCertPEM, caKeyPEM []byte, hosts []string, lifetime time.Duration, log *slog.Logger) (*certIssuer, error) {
	pair, err := tls.X509KeyPair(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("load ATC CA: %w", err)
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parse ATC CA: %w", err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("ATC CA key cannot sign")
	}
	if lifetime <= 0 {
		lifetime = DefaultGRPCCertLifetime
	}
	return &certIssuer{ca: ca, caKey: signer, hosts: hosts, lifetime: lifetime, log: log, now: time.Now}, nil
}

// GetCertificate implements tls.Config.GetCertificate.
func (c *certIssuer) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if c.cur != nil && now.Before(c.renewAt) {
		return c.cur, nil
	}
	cert, err := c.issue(now)
	if err != nil {
		if c.cur != nil && now.Before(c.cur.Leaf.NotAfter) {
			return c.cur, nil // still valid: try again at the next handshake
		}
		return nil, err
	}
	c.cur, c.renewAt = cert, now.Add(c.lifetime*2/3)
	if c.log != nil {
		c.log.Info("issued gRPC server certificate", "hosts", c.hosts, "not_after", cert.Leaf.NotAfter, "renew_at", c.renewAt)
	}
	return cert, nil
}

func (c *certIssuer) issue(now time.Time) (*tls.Certificate, error) {
	key, _, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("generate gRPC key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: c.hosts[0]},
		// A little back-dated, for clocks a step pod's node may be behind by.
		NotBefore: now.Add(-5 * time.Minute), NotAfter: now.Add(c.lifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range c.hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca, &key.PublicKey, c.caKey)
	if err != nil {
		return nil, fmt.Errorf("create gRPC certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse gRPC certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// tokenKey loads the step token signing key from dir, creating it on first
// use: it must outlive restarts, or running steps could not reconnect.
func tokenKey(dir string, generate func() ([]byte, error)) ([]byte, error) {
	path := filepath.Join(dir, "step-token.key")
	key, err := os.ReadFile(path)
	if err == nil {
		return key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read step token key: %w", err)
	}
	if key, err = generate(); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, key, 0o600); err != nil {
		return nil, fmt.Errorf("write step token key: %w", err)
	}
	return key, nil
}
