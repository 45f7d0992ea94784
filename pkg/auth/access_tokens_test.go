package auth

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// tokenUsers are memUsers that also keep opaque access tokens and logins.
type tokenUsers struct {
	*memUsers
	mu     sync.Mutex
	tokens map[string]string
	logins []string
}

func (u *tokenUsers) SaveAccessToken(_ context.Context, hash, signed string, _ time.Time) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.tokens[hash] = signed
	return nil
}

func (u *tokenUsers) AccessToken(_ context.Context, hash string) (string, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	s, ok := u.tokens[hash]
	if !ok {
		return "", fmt.Errorf("token %s: %w", hash[:8], ErrUnknownToken)
	}
	return s, nil
}

func (u *tokenUsers) RecordLogin(_ context.Context, connector, name string, _ time.Time) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.logins = append(u.logins, connector+":"+name)
	return nil
}

// TestOpaqueAccessTokens: with AccessTokens, fly gets Concourse's opaque
// token (20 random bytes and the expiry, what `fly targets` reads); the
// API takes it for the signed one, which is the id_token.
func TestOpaqueAccessTokens(t *testing.T) {
	_, _, mem := tokenServerWith(t, nil)
	users := &tokenUsers{memUsers: mem, tokens: map[string]string{}}
	iss := NewIssuer(newTestKey(t), "http://example.invalid/sky/issuer", time.Hour)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mux := http.NewServeMux()
	mux.Handle("/sky/issuer/token", TokenHandler(iss, users, log))
	mux.HandleFunc("/api/v1/user", func(w http.ResponseWriter, r *http.Request) {
		if c, ok := FromContext(r.Context()); ok {
			_, _ = io.WriteString(w, c.UserID)
			return
		}
		http.Error(w, fmt.Sprint(TokenError(r.Context())), http.StatusUnauthorized)
	})
	srv := httptest.NewServer(Authenticate(iss, users, log, nil)(mux))
	t.Cleanup(srv.Close)

	before := time.Now()
	access := loginAs(t, srv.URL, "test", "test")
	raw, err := base64.RawStdEncoding.DecodeString(access)
	if err != nil || len(raw) != 28 {
		t.Fatalf("access token %q is not 28 bytes of base64: %v", access, err)
	}
	exp := time.Unix(int64(binary.LittleEndian.Uint64(raw[20:])), 0)
	if exp.Before(before.Add(time.Hour-2*time.Second)) || exp.After(time.Now().Add(time.Hour)) {
		t.Errorf("expiry in the token %v, want an hour from now", exp)
	}
	if code, body := getWith(t, srv.URL+"/api/v1/user", access); code != 200 || body != "test" {
		t.Errorf("with the opaque token: %d %s", code, body)
	}
	if len(users.logins) != 1 || users.logins[0] != "local:test" {
		t.Errorf("logins recorded %v", users.logins)
	}
	raw[0] ^= 1
	if code, body := getWith(t, srv.URL+"/api/v1/user", base64.RawStdEncoding.EncodeToString(raw)); code != 401 {
		t.Errorf("a forged opaque token: %d %s, want 401", code, body)
	}
}
