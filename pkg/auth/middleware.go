package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/porter-ci/porter/pkg/httpreply"
)

type contextKey int

const (
	claimsKey contextKey = iota
	tokenErrorKey
)

// ErrUnsupportedScheme is the TokenError of a request whose Authorization
// header is not a bearer token.
var ErrUnsupportedScheme = errors.New("authorization is not a bearer token")

// Why Authenticate refused a token that Verify accepted; the TokenError wraps
// one of these.
var (
	ErrRevoked     = errors.New("token revoked: its user logged out")
	ErrUserRemoved = errors.New("the token's user no longer exists")
)

// Unavailable answers a request that cannot be served because the user
// store failed (err wraps the store's error, which may name internals).
type Unavailable func(w http.ResponseWriter, r *http.Request, err error)

// plainUnavailable answers 503 without the store's error.
func plainUnavailable(w http.ResponseWriter, _ *http.Request, _ error) {
	httpreply.Text(w, http.StatusServiceUnavailable, "the user store is unavailable; try again")
}

// Authenticate puts the Claims of a valid "Authorization: Bearer <token>" into
// the request's context (see FromContext). A request without the header stays
// anonymous; so does one with a bad, expired or revoked token, but TokenError
// says why, so handlers can answer 401 either way and log the reason.
//
// Every token is checked against its user's Session: a token of an older
// generation (the user logged out since) or of a user that was removed is
// refused, and the Claims' teams are the user's roles now, not at login. When
// the sessions cannot be read the request is answered 503 here, by
// unavailable (nil: a plain-text 503): neither trusting the token nor
// telling fly to log in again would be right.
func Authenticate(iss *Issuer, sessions Sessions, log *slog.Logger, unavailable Unavailable) func(http.Handler) http.Handler {
	if unavailable == nil {
		unavailable = plainUnavailable
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			header := r.Header.Get("Authorization")
			if header == "" {
				next.ServeHTTP(w, r)
				return
			}
			ctx := r.Context()
			refuse := func(err error) {
				// The answer gives only the server's own reason (a library's
				// would coach a forger): the whole of it is here. An expired
				// token is routine, anything else worth an operator's look.
				level := slog.LevelInfo
				if errors.Is(err, ErrExpired) {
					level = slog.LevelDebug
				}
				log.Log(ctx, level, "refused token", "path", r.URL.Path, "err", err)
				next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, tokenErrorKey, err)))
			}
			// fly sends "Bearer", but its hijack sends "bearer".
			scheme, token, _ := strings.Cut(header, " ")
			if !strings.EqualFold(scheme, "bearer") {
				refuse(ErrUnsupportedScheme)
				return
			}
			token = strings.TrimSpace(token)
			if at, ok := sessions.(AccessTokens); ok && isOpaque(token) {
				signed, err := at.AccessToken(ctx, opaqueHash(token))
				switch {
				case errors.Is(err, ErrUnknownToken):
					refuse(fmt.Errorf("verify token: %w: %w", ErrInvalidToken, err))
					return
				case err != nil:
					log.ErrorContext(ctx, "checking a token: reading the access token", "err", err)
					unavailable(w, r, fmt.Errorf("cannot check the token now: the user store is unavailable; try again: %w", err))
					return
				}
				token = signed
			}
			claims, err := iss.Verify(token)
			if err != nil {
				refuse(err)
				return
			}
			sess, err := sessions.Session(ctx, claims.Connector, claims.UserID)
			switch {
			case errors.Is(err, ErrUnknownUser):
				refuse(fmt.Errorf("verify token: %w", ErrUserRemoved))
				return
			case err != nil:
				log.ErrorContext(ctx, "checking a token: reading the user's session", "user", claims.UserID, "err", err)
				unavailable(w, r, fmt.Errorf("cannot check the token now: the user store is unavailable; try again: %w", err))
				return
			case sess.Generation != claims.Generation:
				refuse(fmt.Errorf("verify token: %w", ErrRevoked))
				return
			}
			claims.Teams = sess.Teams
			if claims.Teams == nil {
				claims.Teams = map[string][]string{}
			}
			claims.IsAdmin = isAdmin(claims.Teams)
			next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, claimsKey, claims)))
		})
	}
}

// Logout answers GET /sky/logout. With a valid token it ends every session of
// the token's user (its generation moves on), so that token and any copy of
// it stop working at once; without one there is nothing to end. fly's own
// `fly logout` only forgets its copy and never calls the server.
func Logout(users SessionEnder, log *slog.Logger, unavailable Unavailable) http.Handler {
	if unavailable == nil {
		unavailable = plainUnavailable
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		claims, ok := FromContext(ctx)
		if !ok {
			w.WriteHeader(http.StatusOK)
			return
		}
		if err := users.EndSessions(ctx, claims.Connector, claims.UserID); err != nil && !errors.Is(err, ErrUnknownUser) {
			log.ErrorContext(ctx, "logout failed: ending the user's sessions", "user", claims.UserID, "err", err)
			unavailable(w, r, fmt.Errorf("logout failed: the user store is unavailable; try again: %w", err))
			return
		}
		log.InfoContext(ctx, "logged out: every token of the user ends", "user", claims.UserID)
		w.WriteHeader(http.StatusOK)
	})
}

// FromContext returns the Claims Authenticate verified, if any.
func FromContext(ctx context.Context) (Claims, bool) {
	c, ok := ctx.Value(claimsKey).(Claims)
	return c, ok
}

// TokenError says why Authenticate refused the token the request sent; nil if
// it sent none or the token was good.
func TokenError(ctx context.Context) error {
	err, _ := ctx.Value(tokenErrorKey).(error)
	return err
}

// RefuseCrossOrigin refuses, with 403, state-changing requests (POST, PUT,
// PATCH, DELETE) a browser sends from another site: an Origin that is neither
// the request's own host nor externalURL's, or Sec-Fetch-Site: cross-site or
// same-site. WebSocket upgrades, though GETs, are checked the same way, since
// a hijack runs commands. fly sends neither header, so it passes.
func RefuseCrossOrigin(externalURL string) func(http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	origin := ""
	if u, err := url.Parse(externalURL); err == nil && u.Scheme != "" && u.Host != "" {
		origin = u.Scheme + "://" + u.Host
		// Behind a proxy that rewrites Host, the external URL is still "us".
		_ = cop.AddTrustedOrigin(origin)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			check := r
			if isWebSocketUpgrade(r) {
				// CrossOriginProtection lets every GET through; judge the
				// upgrade as the state-changing request it is.
				check = r.WithContext(r.Context())
				check.Method = http.MethodPost
			}
			if err := cop.Check(check); err != nil {
				from := r.Header.Get("Origin")
				if from == "" {
					from = "Sec-Fetch-Site: " + r.Header.Get("Sec-Fetch-Site")
				}
				msg := fmt.Sprintf("cross-origin request refused: %s is not this server", from)
				if origin != "" {
					msg += " (" + origin + ")"
				}
				httpreply.Text(w, http.StatusForbidden, msg)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func isWebSocketUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}
