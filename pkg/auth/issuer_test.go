package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

const testIssuerURL = "http://127.0.0.1:8080/sky/issuer"

func newTestKey(t *testing.T) crypto.Signer {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// clock is a settable time for an Issuer under test.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func testClaims() Claims {
	return Claims{
		UserID:    "test",
		Name:      "test",
		Email:     "test",
		Connector: "local",
		Teams:     map[string][]string{"main": {"owner"}, "dev": {"viewer"}},
	}
}

func TestIssueVerifyRoundTrip(t *testing.T) {
	clk := &clock{time.Date(2026, 11, 23, 15, 22, 10, 500_000_000, time.UTC)}
	iss := NewIssuer(newTestKey(t), testIssuerURL, 24*time.Hour, WithClock(clk.now))

	token, err := iss.Issue(testClaims())
	if err != nil {
		t.Fatal(err)
	}
	got, err := iss.Verify(token)
	if err != nil {
		t.Fatal(err)
	}
	if got.Subject != "CgR0ZXN0EgVsb2NhbA" || got.UserID != "test" || got.Connector != "local" || got.Name != "test" {
		t.Errorf("identity = %+v", got)
	}
	if !got.IsAdmin {
		t.Error("owner of main is not admin")
	}
	if r := got.Roles("dev"); len(r) != 1 || r[0] != "viewer" {
		t.Errorf("dev roles = %v", r)
	}
	wantIat := time.Date(2026, 11, 23, 15, 22, 10, 0, time.UTC)
	if !got.IssuedAt.Equal(wantIat) || !got.Expiry.Equal(wantIat.Add(24*time.Hour)) {
		t.Errorf("iat %v exp %v", got.IssuedAt, got.Expiry)
	}
}

func TestIssueDerivesAdmin(t *testing.T) {
	iss := NewIssuer(newTestKey(t), testIssuerURL, time.Hour)
	c := testClaims()
	c.Teams = map[string][]string{"main": {"member"}}
	c.IsAdmin = true // a caller's say-so does not make an admin
	token, err := iss.Issue(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := iss.Verify(token)
	if err != nil {
		t.Fatal(err)
	}
	if got.IsAdmin {
		t.Fatal("member of main became admin")
	}
}

func TestVerifyRefuses(t *testing.T) {
	key := newTestKey(t)
	clk := &clock{time.Now()}
	iss := NewIssuer(key, testIssuerURL, time.Hour, WithClock(clk.now))
	good, err := iss.Issue(testClaims())
	if err != nil {
		t.Fatal(err)
	}
	header, payload, sig := splitJWT(t, good)

	otherKey, err := NewIssuer(newTestKey(t), testIssuerURL, time.Hour).Issue(testClaims())
	if err != nil {
		t.Fatal(err)
	}
	otherIssuer, err := NewIssuer(key, "http://evil.example/sky/issuer", time.Hour).Issue(testClaims())
	if err != nil {
		t.Fatal(err)
	}

	// A payload that makes the holder owner of every team, under the good
	// signature.
	var claims map[string]any
	decodeSegment(t, payload, &claims)
	claims["teams"] = map[string][]string{"main": {"owner"}, "secret": {"owner"}}
	tampered := header + "." + encodeSegment(t, claims) + "." + sig

	none := encodeSegment(t, map[string]string{"alg": "none", "typ": "JWT"}) + "." + payload + "."

	// HS256 with the public key as the secret: the classic algorithm confusion.
	hsHeader := encodeSegment(t, map[string]string{"alg": "HS256", "typ": "JWT"})
	mac := hmac.New(sha256.New, key.Public().(ed25519.PublicKey))
	mac.Write([]byte(hsHeader + "." + payload))
	hs256 := hsHeader + "." + payload + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))

	tests := []struct {
		name, token string
	}{
		{"tampered payload", tampered},
		{"other key", otherKey},
		{"other issuer", otherIssuer},
		{"alg none", none},
		{"alg HS256", hs256},
		{"malformed", "not.a.token"},
		{"empty", ""},
		{"signature cut", header + "." + payload + "."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := iss.Verify(tt.token)
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("Verify = %v, want ErrInvalidToken", err)
			}
			if errors.Is(err, ErrExpired) {
				t.Fatalf("Verify = %v, also claims expiry", err)
			}
		})
	}

	t.Run("expired", func(t *testing.T) {
		clk.t = clk.t.Add(time.Hour + time.Second)
		defer func() { clk.t = clk.t.Add(-time.Hour - time.Second) }()
		_, err := iss.Verify(good)
		if !errors.Is(err, ErrExpired) {
			t.Fatalf("Verify = %v, want ErrExpired", err)
		}
	})

	t.Run("good one still passes", func(t *testing.T) {
		if _, err := iss.Verify(good); err != nil {
			t.Fatal(err)
		}
	})
}

func TestECDSAKey(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	iss := NewIssuer(key, testIssuerURL, time.Hour)
	token, err := iss.Issue(testClaims())
	if err != nil {
		t.Fatal(err)
	}
	header, _, _ := splitJWT(t, token)
	var h map[string]any
	decodeSegment(t, header, &h)
	if h["alg"] != "ES256" {
		t.Errorf("alg = %v, want ES256", h["alg"])
	}
	if _, err := iss.Verify(token); err != nil {
		t.Fatal(err)
	}
	// An EdDSA token must not pass an ES256 verifier, even for the same claims.
	eddsa, err := NewIssuer(newTestKey(t), testIssuerURL, time.Hour).Issue(testClaims())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := iss.Verify(eddsa); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("Verify(EdDSA token) = %v, want ErrInvalidToken", err)
	}
}

func TestUnsupportedKeyRefused(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewIssuer(key, testIssuerURL, time.Hour).Issue(testClaims()); err == nil {
		t.Fatal("issued with a P-384 key")
	}
}

func splitJWT(t *testing.T, token string) (header, payload, sig string) {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	return parts[0], parts[1], parts[2]
}

func decodeSegment(t *testing.T, seg string, v any) {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func encodeSegment(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
