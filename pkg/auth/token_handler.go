package auth

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/httpreply"
	"golang.org/x/crypto/bcrypt"
)

// flyClientSecret is fly's OAuth2 client secret, built into fly
// (fly/commands/login.go).
const flyClientSecret = "Zmx5"

// dummyHash is compared against when the user does not exist, so an unknown
// user takes as long to refuse as a wrong password and names cannot be probed
// by timing. Its password is never sent by anyone.
const dummyHash = "$2a$10$AzEIiEjsfcRuPwjYcUJmZuPihN83g44tkhANpTv/hhcQNZWpwiTiy"

// maxTokenRequest bounds the form a token request may send.
const maxTokenRequest = 64 << 10

// knownScope reports whether dex accepts scope in a password grant; fly asks
// for all of these but offline_access.
func knownScope(s string) bool {
	switch s {
	case "openid", "profile", "email", "groups", "federated:id", "offline_access":
		return true
	default:
		return false
	}
}

// tokenResponse is the OAuth2 token response fly reads (golang.org/x/oauth2).
type tokenResponse struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int    `json:"expires_in"`
	IDToken     string `json:"id_token"`
}

// oauthError is an RFC 6749 §5.2 error, which fly's oauth2 library turns into
// its error message.
type oauthError struct {
	Error       string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

// TokenOption adjusts TokenHandler.
type TokenOption func(*tokenHandlerConfig)

type tokenHandlerConfig struct{ throttle *Throttle }

// WithThrottle makes TokenHandler count failed logins in t rather than in a
// Throttle of its own with DefaultThrottleConfig.
func WithThrottle(t *Throttle) TokenOption {
	return func(c *tokenHandlerConfig) { c.throttle = t }
}

// TokenHandler answers POST /sky/issuer/token with the password grant, as
// Concourse's dex does for fly: client fly:Zmx5 in Basic auth, the user's name
// and password in the form. Statuses and error codes follow dex so fly
// reports failures the same way.
//
// Failed logins are throttled per user name and per client address (the
// connection's peer): past the allowance the answer is 429 with Retry-After,
// before any bcrypt comparison, so guessing is slow and cannot eat the CPU.
func TokenHandler(iss *Issuer, users Users, log *slog.Logger, opts ...TokenOption) http.Handler {
	var cfg tokenHandlerConfig
	for _, opt := range opts {
		opt(&cfg)
	}
	throttle := cfg.throttle
	if throttle == nil {
		throttle = NewThrottle(DefaultThrottleConfig(), nil)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if r.Method != http.MethodPost {
			writeOAuthError(w, http.StatusBadRequest, "invalid_request", "method not allowed")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxTokenRequest)
		if err := r.ParseForm(); err != nil {
			writeOAuthError(w, http.StatusBadRequest, "invalid_request", "Couldn't parse data")
			return
		}
		if gt := r.PostForm.Get("grant_type"); gt != "password" {
			writeOAuthError(w, http.StatusBadRequest, "unsupported_grant_type",
				fmt.Sprintf("grant_type %q is not supported; only password is", gt))
			return
		}
		if !flyClient(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="sky"`)
			writeOAuthError(w, http.StatusUnauthorized, "invalid_client", "Invalid client credentials.")
			return
		}
		scopes := strings.Fields(r.PostForm.Get("scope"))
		if !slices.Contains(scopes, "openid") {
			writeOAuthError(w, http.StatusBadRequest, "invalid_request", `Missing required scope(s) ["openid"].`)
			return
		}
		for _, s := range scopes {
			if !knownScope(s) {
				writeOAuthError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("Unrecognized scope(s) %q", s))
				return
			}
		}

		name, password := r.PostForm.Get("username"), r.PostForm.Get("password")
		addr := clientAddress(r)
		if wait, ok := throttle.Begin(name, addr); !ok {
			secs := int(math.Ceil(wait.Seconds()))
			log.InfoContext(ctx, "login throttled: too many failed logins", "user", name, "address", addr, "retry_after", secs)
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			writeOAuthError(w, http.StatusTooManyRequests, "temporarily_unavailable",
				fmt.Sprintf("too many failed logins for this user or from this address; try again in %s", time.Duration(secs)*time.Second))
			return
		}
		hash, err := users.LocalUserHash(ctx, name)
		if err != nil && !errors.Is(err, ErrUnknownUser) {
			log.ErrorContext(ctx, "login failed: looking up the local user", "user", name, "err", err)
			writeOAuthError(w, http.StatusInternalServerError, "server_error", "the user store is unavailable; try again")
			return
		}
		if err != nil {
			_ = bcrypt.CompareHashAndPassword([]byte(dummyHash), []byte(password))
			log.InfoContext(ctx, "login refused: looking up the local user", "user", name, "err", err)
			writeOAuthError(w, http.StatusUnauthorized, "access_denied", "Invalid username or password")
			return
		}
		if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)); err != nil {
			log.InfoContext(ctx, "login refused: wrong password", "user", name)
			writeOAuthError(w, http.StatusUnauthorized, "access_denied", "Invalid username or password")
			return
		}

		throttle.Succeeded(name, addr)

		access, token, claims, err := mint(ctx, iss, users, log, Claims{
			UserID:    name,
			Name:      name,
			Email:     name, // what Concourse's local users have as email
			Connector: LocalConnector,
		})
		if err != nil {
			log.ErrorContext(ctx, "login failed", "user", name, "err", err)
			writeOAuthError(w, http.StatusInternalServerError, "server_error", "")
			return
		}
		log.InfoContext(ctx, "logged in", "user", name, "expires", claims.Expiry)

		// fly stores only access_token and sends it back as a bearer token
		// (opaque, with AccessTokens); the JWT serves as the OIDC id_token.
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Pragma", "no-cache")
		httpreply.JSON(w, http.StatusOK, tokenResponse{
			AccessToken: access,
			TokenType:   "bearer",
			ExpiresIn:   int(claims.Expiry.Sub(iss.now()).Seconds()),
			IDToken:     token,
		})
	})
}

// flyClient reports whether the request authenticates as fly's OAuth2 client,
// by Basic auth or, as RFC 6749 also allows, in the form.
func flyClient(r *http.Request) bool {
	id, secret, ok := r.BasicAuth()
	if ok {
		// Basic credentials are form-encoded first (RFC 6749 §2.3.1).
		var errID, errSecret error
		id, errID = url.QueryUnescape(id)
		secret, errSecret = url.QueryUnescape(secret)
		if errID != nil || errSecret != nil {
			return false
		}
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	return id == flyClientID && subtle.ConstantTimeCompare([]byte(secret), []byte(flyClientSecret)) == 1
}

func writeOAuthError(w http.ResponseWriter, status int, code, description string) {
	httpreply.JSON(w, status, oauthError{Error: code, Description: description})
}
