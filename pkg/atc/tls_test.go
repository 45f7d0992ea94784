package atc

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"
)

// A real TLS handshake against the issuer's GetCertificate: the client
// verifies the pod-IP SAN against the CA, and after two thirds of the
// lifetime the server presents a new certificate without being restarted.
func TestCertIssuerRotatesBeforeExpiry(t *testing.T) {
	caCert, caKey, err := newCA()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	iss, err := newCertIssuer(caCert, caKey, []string{"10.244.0.7", "atc.porter.svc"}, 3*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	iss.now = func() time.Time { return now }
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caCert)
	srvCfg := &tls.Config{GetCertificate: iss.GetCertificate, MinVersion: tls.VersionTLS12}

	handshake := func(serverName string) (*x509.Certificate, error) {
		t.Helper()
		ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: serverName,
			// The fake clock runs ahead of the real one.
			Time: func() time.Time { return now }})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0], nil
	}

	first, err := handshake("10.244.0.7")
	if err != nil {
		t.Fatalf("handshake by pod IP: %v", err)
	}
	if _, err := handshake("atc.porter.svc"); err != nil {
		t.Fatalf("handshake by Service name: %v", err)
	}
	if _, err := handshake("10.244.0.8"); err == nil {
		t.Fatal("a name the certificate does not cover was accepted")
	}
	now = now.Add(time.Hour) // a third: still the same certificate
	same, err := handshake("10.244.0.7")
	if err != nil {
		t.Fatal(err)
	}
	if same.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatal("re-issued before two thirds of the lifetime")
	}
	now = now.Add(time.Hour + time.Minute) // past two thirds, before expiry
	second, err := handshake("10.244.0.7")
	if err != nil {
		t.Fatal(err)
	}
	if second.SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatal("not re-issued after two thirds of the lifetime")
	}
	if !second.NotAfter.After(first.NotAfter) {
		t.Fatalf("new certificate expires %v, not after the old one's %v", second.NotAfter, first.NotAfter)
	}
}
