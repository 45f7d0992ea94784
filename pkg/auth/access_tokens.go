package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// AccessTokens keeps the opaque access tokens fly holds. Concourse gives
// fly 20 random bytes followed by the expiry (little-endian Unix seconds),
// base64-encoded, and `fly targets` reads the expiry from them; a JWT
// shows there as "n/a: invalid token". The opaque token stands for the
// signed one, which is what the server checks.
//
// A Users (for TokenHandler) or Sessions (for Authenticate) that also
// implements AccessTokens turns this on; without it the JWT is the access
// token.
type AccessTokens interface {
	// SaveAccessToken keeps, until expires, the signed token that the
	// opaque token whose sha256 (hex) is hash stands for.
	SaveAccessToken(ctx context.Context, hash, signed string, expires time.Time) error
	// AccessToken is the signed token of an unexpired opaque one, or an
	// error wrapping ErrUnknownToken.
	AccessToken(ctx context.Context, hash string) (string, error)
}

// ErrUnknownToken is wrapped by AccessTokens for an opaque token it does
// not hold (never issued, expired or forgotten).
var ErrUnknownToken = errors.New("unknown access token")

// opaqueLen is the decoded length of an opaque token: 20 random bytes and
// an 8-byte expiry.
const opaqueLen = 28

// newOpaqueToken makes an opaque token expiring at exp, and its hash.
func newOpaqueToken(exp time.Time) (token, hash string, err error) {
	var b [opaqueLen]byte
	if _, err := rand.Read(b[:20]); err != nil {
		return "", "", fmt.Errorf("make an access token: %w", err)
	}
	binary.LittleEndian.PutUint64(b[20:], uint64(exp.Unix()))
	token = base64.RawStdEncoding.EncodeToString(b[:])
	return token, opaqueHash(token), nil
}

func opaqueHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// isOpaque says whether token has an opaque token's shape (a JWT never
// does: it has dots).
func isOpaque(token string) bool {
	b, err := base64.RawStdEncoding.DecodeString(token)
	return err == nil && len(b) == opaqueLen
}
