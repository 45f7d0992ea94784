package sidecar

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// firstBytes accepts one connection on a real listener and returns what
// the client sent first (nil if nobody connected within wait).
func firstBytes(t *testing.T, ln net.Listener, wait time.Duration) []byte {
	t.Helper()
	got := make(chan []byte, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer conn.Close()
		_ = conn.SetReadDeadline(time.Now().Add(wait))
		buf := make([]byte, 16)
		n, _ := io.ReadAtLeast(conn, buf, 1)
		got <- buf[:n]
	}()
	select {
	case b := <-got:
		return b
	case <-time.After(wait):
		return nil
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// connect opens a stream the way the link does, in the background.
func connect(t *testing.T, cfg ATCConfig) error {
	t.Helper()
	conn, err := dialATC(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	t.Cleanup(func() { cancel(); conn.Close() })
	go func() { _, _ = eventspb.NewStepStreamClient(conn).Connect(ctx) }()
	return nil
}

func TestSidecarWithoutCARefusesToDial(t *testing.T) {
	ln := listen(t)
	cfg := ATCConfig{Address: ln.Addr().String(), Token: "step-token"}
	if err := connect(t, cfg); !errors.Is(err, errNoCA) {
		t.Fatalf("dial without CA = %v, want %v", err, errNoCA)
	}
	_, err := Run(context.Background(), Config{Action: &action.Action{StepID: "s"}, ATC: cfg, JournalDir: t.TempDir(), SocketPath: t.TempDir() + "/c.sock"})
	if !errors.Is(err, errNoCA) {
		t.Fatalf("sidecar.Run without CA = %v, want %v", err, errNoCA)
	}
	if b := firstBytes(t, ln, 500*time.Millisecond); b != nil {
		t.Fatalf("the ATC's address received %q", b)
	}
}

func TestSidecarDialsPlainOnlyWhenTheActionSaysSo(t *testing.T) {
	ln := listen(t)
	// Insecure is what sidecar.Run sets from the action's marker.
	cfg := ATCConfig{Address: ln.Addr().String(), Token: "step-token", Insecure: true}
	if err := connect(t, cfg); err != nil {
		t.Fatal(err)
	}
	if b := firstBytes(t, ln, 5*time.Second); !bytes.HasPrefix(b, []byte("PRI * HTTP/2.0")) {
		t.Fatalf("first bytes %q, want the plain HTTP/2 preface", b)
	}
}

func TestSidecarWithCADialsTLS(t *testing.T) {
	ln := listen(t)
	if err := connect(t, ATCConfig{Address: ln.Addr().String(), Token: "step-token", CAPEM: testCA(t), ServerName: "atc"}); err != nil {
		t.Fatal(err)
	}
	// 0x16 is a TLS handshake record: the token cannot go out in clear.
	if b := firstBytes(t, ln, 5*time.Second); len(b) == 0 || b[0] != 0x16 {
		t.Fatalf("first bytes %q, want a TLS handshake", b)
	}
}

func TestReconnectDelayIsJitteredAndBounded(t *testing.T) {
	for n, want := range map[int]time.Duration{0: reconnectBase, 1: 2 * reconnectBase, 3: 8 * reconnectBase, 50: reconnectMax} {
		lo := reconnectDelay(n, func() float64 { return 0 })
		hi := reconnectDelay(n, func() float64 { return 0.999999 })
		if lo != time.Duration(float64(want)*(1-reconnectJitter)) {
			t.Errorf("attempt %d: shortest delay %s, want %s", n, lo, time.Duration(float64(want)*(1-reconnectJitter)))
		}
		if hi <= want || hi > time.Duration(float64(want)*(1+reconnectJitter)) {
			t.Errorf("attempt %d: longest delay %s, want just under %s", n, hi, time.Duration(float64(want)*(1+reconnectJitter)))
		}
	}
}

func testCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
