package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
)

type contextKey int

const (
	claimsKey contextKey = iota
	tokenErrorKey
)

// ErrUnsupportedScheme is the TokenError of a request whose Authorization
// header is not a bearer token.
var ErrUnsupportedScheme = errors.New("authorization is not a bearer token")

// Authenticate puts the Claims of a valid "Authorization: Bearer <token>" into
// the request's context (see FromContext). A request without the header stays
// anonymous; so does one with a bad or expired token, but TokenError says why,
// so handlers can answer 401 either way and log the reason.
func Authenticate(iss *Issuer, log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			header := r.Header.Get("Authorization")
			if header == "" {
				next.ServeHTTP(w, r)
				return
			}
			ctx := r.Context()
			// fly sends "Bearer", but its hijack sends "bearer".
			scheme, token, _ := strings.Cut(header, " ")
			if !strings.EqualFold(scheme, "bearer") {
				log.DebugContext(ctx, "ignoring authorization", "path", r.URL.Path, "err", ErrUnsupportedScheme)
				next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, tokenErrorKey, ErrUnsupportedScheme)))
				return
			}
			claims, err := iss.Verify(strings.TrimSpace(token))
			if err != nil {
				log.DebugContext(ctx, "refused token", "path", r.URL.Path, "err", err)
				next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, tokenErrorKey, err)))
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, claimsKey, claims)))
		})
	}
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
				http.Error(w, msg, http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func isWebSocketUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}
