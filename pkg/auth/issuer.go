package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Why Verify refused a token; the returned error wraps one of these.
var (
	ErrExpired      = errors.New("token expired")
	ErrInvalidToken = errors.New("invalid token")
)

// flyClientID is the OAuth2 client fly logs in as, and the tokens' audience,
// as with dex.
const flyClientID = "fly"

// Issuer signs and verifies Porter's tokens.
type Issuer struct {
	key    crypto.Signer
	public crypto.PublicKey
	method jwt.SigningMethod // nil when the key is of an unsupported type
	keyID  string
	url    string
	ttl    time.Duration
	now    func() time.Time
}

// IssuerOption adjusts an Issuer.
type IssuerOption func(*Issuer)

// WithClock makes the Issuer read the time from now, for tests.
func WithClock(now func() time.Time) IssuerOption {
	return func(i *Issuer) { i.now = now }
}

// NewIssuer signs with key (Ed25519, or ECDSA P-256 as *ecdsa.PrivateKey) as
// issuerURL, e.g. http://127.0.0.1:8080/sky/issuer; tokens live for ttl.
func NewIssuer(key crypto.Signer, issuerURL string, ttl time.Duration, opts ...IssuerOption) *Issuer {
	i := &Issuer{key: key, public: key.Public(), url: issuerURL, ttl: ttl, now: time.Now}
	switch pub := i.public.(type) {
	case ed25519.PublicKey:
		i.method = jwt.SigningMethodEdDSA
	case *ecdsa.PublicKey:
		// golang-jwt signs ES256 only with the concrete private key type.
		if _, ok := key.(*ecdsa.PrivateKey); ok && pub.Curve.Params().Name == "P-256" {
			i.method = jwt.SigningMethodES256
		}
	}
	// The key ID lets a future key rotation tell keys apart.
	if der, err := x509.MarshalPKIXPublicKey(i.public); err == nil {
		sum := sha256.Sum256(der)
		i.keyID = hex.EncodeToString(sum[:8])
	}
	for _, opt := range opts {
		opt(i)
	}
	return i
}

// TTL is how long the Issuer's tokens live.
func (i *Issuer) TTL() time.Duration { return i.ttl }

// tokenClaims is the token's JSON payload: dex's ID token claims, so anything
// reading a Concourse token reads ours, plus the teams the holder had at login.
type tokenClaims struct {
	jwt.RegisteredClaims
	Email             string              `json:"email,omitempty"`
	EmailVerified     bool                `json:"email_verified,omitempty"`
	Name              string              `json:"name,omitempty"`
	PreferredUsername string              `json:"preferred_username,omitempty"`
	FederatedClaims   federatedClaims     `json:"federated_claims"`
	Teams             map[string][]string `json:"teams"`
	// Generation is Porter's own: the user's token generation at login.
	Generation int64 `json:"porter_generation,omitempty"`
}

type federatedClaims struct {
	ConnectorID string `json:"connector_id"`
	UserID      string `json:"user_id"`
}

// Issue signs a token for c, valid from now for the Issuer's TTL; c's own
// IssuedAt and Expiry are ignored.
func (i *Issuer) Issue(c Claims) (string, error) {
	token, _, err := i.issue(c)
	return token, err
}

// issue also returns the claims as signed, so the token endpoint can report
// the real expiry.
func (i *Issuer) issue(c Claims) (string, Claims, error) {
	if i.method == nil {
		return "", Claims{}, fmt.Errorf("sign token: unsupported signing key type %T", i.key)
	}
	// JWT times are whole seconds; truncating here makes the Claims we return
	// agree with what Verify will read back.
	now := i.now().Truncate(time.Second)
	c.IssuedAt = now
	c.Expiry = now.Add(i.ttl)
	c.IsAdmin = isAdmin(c.Teams)
	if c.Subject == "" {
		c.Subject = SubjectFor(c.Connector, c.UserID)
	}
	tc := tokenClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    i.url,
			Subject:   c.Subject,
			Audience:  jwt.ClaimStrings{flyClientID},
			ExpiresAt: jwt.NewNumericDate(c.Expiry),
			IssuedAt:  jwt.NewNumericDate(c.IssuedAt),
		},
		Email:             c.Email,
		EmailVerified:     c.Email != "",
		Name:              c.Name,
		PreferredUsername: c.UserName,
		FederatedClaims:   federatedClaims{ConnectorID: c.Connector, UserID: c.UserID},
		Teams:             c.Teams,
		Generation:        c.Generation,
	}
	t := jwt.NewWithClaims(i.method, tc)
	if i.keyID != "" {
		t.Header["kid"] = i.keyID
	}
	signed, err := t.SignedString(i.key)
	if err != nil {
		return "", Claims{}, fmt.Errorf("sign token: %w", err)
	}
	return signed, c, nil
}

// Verify checks token's signature, issuer, audience and expiry and returns its
// claims. Only the Issuer's own algorithm is accepted, so "none" and HMAC
// tokens (signed with the public key as a secret) are refused. Errors wrap
// ErrExpired or ErrInvalidToken.
func (i *Issuer) Verify(token string) (Claims, error) {
	if i.method == nil {
		return Claims{}, fmt.Errorf("verify token: unsupported signing key type %T: %w", i.key, ErrInvalidToken)
	}
	var tc tokenClaims
	_, err := jwt.ParseWithClaims(token, &tc,
		func(*jwt.Token) (any, error) { return i.public, nil },
		jwt.WithValidMethods([]string{i.method.Alg()}),
		jwt.WithIssuer(i.url),
		jwt.WithAudience(flyClientID),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(i.now),
	)
	if err != nil {
		// The signature is checked before expiry, so an expired token here is
		// one this Issuer really signed; it is only "expired" if nothing else
		// is wrong with it.
		if errors.Is(err, jwt.ErrTokenExpired) &&
			!errors.Is(err, jwt.ErrTokenInvalidIssuer) && !errors.Is(err, jwt.ErrTokenInvalidAudience) {
			return Claims{}, fmt.Errorf("verify token: %w", ErrExpired)
		}
		return Claims{}, fmt.Errorf("verify token: %w: %w", ErrInvalidToken, err)
	}
	c := Claims{
		Subject:   tc.Subject,
		UserID:    tc.FederatedClaims.UserID,
		Name:      tc.Name,
		UserName:  tc.PreferredUsername,
		Email:     tc.Email,
		Connector: tc.FederatedClaims.ConnectorID,
		Teams:     tc.Teams,
		IsAdmin:   isAdmin(tc.Teams),
		Expiry:    tc.ExpiresAt.Time,

		Generation: tc.Generation,
	}
	if tc.IssuedAt != nil {
		c.IssuedAt = tc.IssuedAt.Time
	}
	if c.Teams == nil {
		c.Teams = map[string][]string{}
	}
	return c, nil
}
