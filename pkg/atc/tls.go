package atc

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// serverTLS loads the gRPC endpoint's certificate from dir, creating a
// private CA and a certificate for host on first use. Sidecars get the CA
// through their step's Secret, so no public PKI is needed.
func serverTLS(dir, host string) (*tls.Config, []byte, error) {
	caCertPath, caKeyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	certPath, keyPath := filepath.Join(dir, "grpc-"+host+".crt"), filepath.Join(dir, "grpc-"+host+".key")
	if _, err := os.Stat(caCertPath); errors.Is(err, os.ErrNotExist) {
		if err := writeCA(caCertPath, caKeyPath); err != nil {
			return nil, nil, err
		}
	}
	caPEM, err := os.ReadFile(caCertPath)
	if err != nil {
		return nil, nil, fmt.Errorf("read ATC CA: %w", err)
	}
	if _, err := os.Stat(certPath); errors.Is(err, os.ErrNotExist) {
		if err := writeServerCert(caCertPath, caKeyPath, certPath, keyPath, host); err != nil {
			return nil, nil, err
		}
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("load gRPC certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, caPEM, nil
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

func writeCA(certPath, keyPath string) error {
	key, keyPEM, err := newKey()
	if err != nil {
		return fmt.Errorf("generate ATC CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "porter ATC CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("create ATC CA: %w", err)
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return fmt.Errorf("write ATC CA key: %w", err)
	}
	return os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeServerCert(caCertPath, caKeyPath, certPath, keyPath, host string) error {
	ca, err := tls.LoadX509KeyPair(caCertPath, caKeyPath)
	if err != nil {
		return fmt.Errorf("load ATC CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return fmt.Errorf("parse ATC CA: %w", err)
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return fmt.Errorf("generate gRPC key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(2, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		return fmt.Errorf("create gRPC certificate: %w", err)
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return fmt.Errorf("write gRPC key: %w", err)
	}
	return os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
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
