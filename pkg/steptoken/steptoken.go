// Package steptoken mints and verifies the per-step tokens a sidecar presents
// to the ATC. A token names exactly one step and expires; it is an HMAC over
// the step ID and expiry, so the ATC needs no token table to verify it.
package steptoken

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrInvalid is returned (wrapped) for every token that must be refused.
var ErrInvalid = errors.New("invalid step token")

// Keyring signs and verifies tokens with one secret key.
type Keyring struct {
	key []byte
	now func() time.Time
}

// NewKeyring uses key, which must be at least 32 bytes.
func NewKeyring(key []byte) (*Keyring, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("step token key is %d bytes, want at least 32", len(key))
	}
	return &Keyring{key: append([]byte(nil), key...), now: time.Now}, nil
}

// NewKey returns a fresh random signing key.
func NewKey() ([]byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("generate step token key: %w", err)
	}
	return k, nil
}

type claims struct {
	Step    string `json:"step"`
	Expires int64  `json:"exp"`
}

// Mint returns a token for stepID valid for ttl.
func (k *Keyring) Mint(stepID string, ttl time.Duration) (string, error) {
	body, err := json.Marshal(claims{Step: stepID, Expires: k.now().Add(ttl).Unix()})
	if err != nil {
		return "", fmt.Errorf("mint token for step %q: %w", stepID, err)
	}
	payload := base64.RawURLEncoding.EncodeToString(body)
	return payload + "." + base64.RawURLEncoding.EncodeToString(k.sign(payload)), nil
}

// Verify checks that token was minted by this keyring for stepID and has not expired.
func (k *Keyring) Verify(token, stepID string) error {
	payload, sig, ok := strings.Cut(token, ".")
	if !ok {
		return fmt.Errorf("%w: malformed", ErrInvalid)
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, k.sign(payload)) {
		return fmt.Errorf("%w: bad signature", ErrInvalid)
	}
	body, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return fmt.Errorf("%w: malformed payload", ErrInvalid)
	}
	var c claims
	if err := json.Unmarshal(body, &c); err != nil {
		return fmt.Errorf("%w: malformed payload", ErrInvalid)
	}
	if c.Step != stepID {
		return fmt.Errorf("%w: token is for step %q, not %q", ErrInvalid, c.Step, stepID)
	}
	if k.now().Unix() > c.Expires {
		return fmt.Errorf("%w: expired at %s", ErrInvalid, time.Unix(c.Expires, 0).UTC().Format(time.RFC3339))
	}
	return nil
}

func (k *Keyring) sign(payload string) []byte {
	m := hmac.New(sha256.New, k.key)
	m.Write([]byte(payload))
	return m.Sum(nil)
}
