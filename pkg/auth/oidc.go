package auth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/porter-ci/porter/pkg/httpreply"
	"golang.org/x/oauth2"
)

// OIDCConnector is the connector ID of users who log in through the OIDC
// connector: their team roles name them "oidc:<user>" and "oidc:<group>".
const OIDCConnector = "oidc"

// OIDC paths: the browser starts at OIDCLoginPath and the identity provider
// sends it back to OIDCCallbackPath (register <external URL>/sky/issuer/callback
// as the client's redirect URI, as for Concourse).
const (
	OIDCLoginPath    = "/sky/issuer/auth/oidc"
	OIDCCallbackPath = "/sky/issuer/callback"
)

// oidcCookie holds a login's state between OIDCLoginPath and the callback.
const oidcCookie = "porter_oidc_login"

// oidcLoginTTL is how long a user has at the identity provider.
const oidcLoginTTL = 10 * time.Minute

// OIDCConfig is the OIDC connector's configuration, Concourse's --oidc-* flags.
type OIDCConfig struct {
	DisplayName  string // on the login page; "OIDC" if empty
	Issuer       string // discovered at <Issuer>/.well-known/openid-configuration
	ClientID     string
	ClientSecret string
	// Scopes are asked for beside "openid"; none means profile and email,
	// as in Concourse. Dex, for one, sends groups only for the "groups" scope.
	Scopes []string
	// GroupsKey is the ID token claim holding the user's groups ("groups").
	GroupsKey string
	// UserNameKey is the claim holding the user's name ("username"), and
	// the only one: see IdentityFromClaims.
	UserNameKey string
	// CACertsPEM are the CAs the identity provider's certificate may chain
	// to, besides the system's.
	CACertsPEM [][]byte
	// ExternalURL is Porter's own URL, the base of the redirect URI.
	ExternalURL string
}

// Validate names what is missing or wrong.
func (c OIDCConfig) Validate() error {
	var errs []error
	if c.Issuer == "" {
		errs = append(errs, errors.New("--oidc-issuer is required"))
	} else if u, err := url.Parse(c.Issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--oidc-issuer %q is not an http(s) URL", c.Issuer))
	}
	if c.ClientID == "" {
		errs = append(errs, errors.New("--oidc-client-id is required"))
	}
	if c.ClientSecret == "" {
		errs = append(errs, errors.New("--oidc-client-secret is required"))
	}
	if c.ExternalURL == "" {
		errs = append(errs, errors.New("the OIDC connector needs the server's external URL"))
	}
	return errors.Join(errs...)
}

// Identity is who the identity provider says logged in.
type Identity struct {
	UserID   string // the "sub" claim
	UserName string // from UserNameKey; what roles name the user by, beside UserID
	Name     string // the "name" claim, else UserName
	Email    string
	Groups   []string
}

// IdentityFromClaims maps an ID token's claims to an Identity. The user name
// is the userNameKey claim ("username" if empty) and nothing else: roles name
// users by it, so falling back to another claim would let whoever can edit
// that one (a display name, an email) take someone else's roles. The "email"
// claim is used only when the provider says it is verified. A missing user
// name refuses the login rather than leaving only "oidc:<sub>" roles: that
// is what Concourse (Dex's OIDC connector) does, and it makes a wrong
// --oidc-user-name-key plain at the first login instead of silently granting
// nothing. Groups are the groupsKey claim, a list of strings or one string.
func IdentityFromClaims(claims map[string]any, userNameKey, groupsKey string) (Identity, error) {
	str := func(k string) string {
		s, _ := claims[k].(string)
		return strings.TrimSpace(s)
	}
	// sub and the user name are kept byte for byte: roles compare them
	// exactly, and trimming would make " alice" into "alice".
	sub, _ := claims["sub"].(string)
	id := Identity{UserID: sub, Email: str("email"), Name: str("name")}
	if strings.TrimSpace(id.UserID) == "" {
		return Identity{}, errors.New(`the ID token has no "sub" claim`)
	}
	if userNameKey == "" {
		userNameKey = "username"
	}
	switch v := claims[userNameKey].(type) {
	case nil:
		return Identity{}, fmt.Errorf("the ID token has no %q claim, which names the user (--oidc-user-name-key)", userNameKey)
	case string:
		if strings.TrimSpace(v) == "" {
			return Identity{}, fmt.Errorf("the ID token's %q claim, which names the user (--oidc-user-name-key), is empty", userNameKey)
		}
		id.UserName = v
	default:
		return Identity{}, fmt.Errorf("the ID token's %q claim, which names the user (--oidc-user-name-key), is a %T, not a string", userNameKey, v)
	}
	if userNameKey == "email" && !emailVerified(claims["email_verified"]) {
		return Identity{}, errors.New(`the ID token's "email" claim names the user (--oidc-user-name-key) but the provider does not say it is verified (email_verified)`)
	}
	if id.Name == "" {
		id.Name = id.UserName
	}
	if groupsKey == "" {
		groupsKey = "groups"
	}
	switch g := claims[groupsKey].(type) {
	case nil:
	case string:
		if g != "" {
			id.Groups = []string{g}
		}
	case []any:
		for _, v := range g {
			s, ok := v.(string)
			if !ok {
				return Identity{}, fmt.Errorf("the ID token's %q claim holds a %T, not only strings", groupsKey, v)
			}
			if s != "" {
				id.Groups = append(id.Groups, s)
			}
		}
	default:
		return Identity{}, fmt.Errorf("the ID token's %q claim is a %T, not a list of groups", groupsKey, g)
	}
	return id, nil
}

// emailVerified reads an email_verified claim: a boolean, or the string
// "true" as some providers (AWS Cognito) send it.
func emailVerified(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}

// SSOUsers is what the OIDC callback needs to know of users.
type SSOUsers interface {
	// SaveSSOUser records the identity a user logged in with: its roles
	// come from that until its next login.
	SaveSSOUser(ctx context.Context, connector string, id Identity) error
	Sessions
}

// OIDC is the OIDC connector: it sends browsers to the identity provider
// (authorization code flow with PKCE, state and nonce) and, on their way
// back, turns the provider's ID token into a Porter token.
type OIDC struct {
	cfg    OIDCConfig
	client *http.Client
	iss    *Issuer
	users  SSOUsers
	log    *slog.Logger

	// The provider is discovered at the first login, not at start, so
	// Porter serves (local users included) while the provider is down.
	mu       sync.Mutex
	provider *oidc.Provider
}

// NewOIDC makes the connector; cfg must Validate.
func NewOIDC(cfg OIDCConfig, iss *Issuer, users SSOUsers, log *slog.Logger) (*OIDC, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.DisplayName == "" {
		cfg.DisplayName = "OIDC"
	}
	if cfg.GroupsKey == "" {
		cfg.GroupsKey = "groups"
	}
	if cfg.UserNameKey == "" {
		cfg.UserNameKey = "username"
	}
	cfg.ExternalURL = strings.TrimRight(cfg.ExternalURL, "/")
	client := &http.Client{Timeout: 30 * time.Second}
	if len(cfg.CACertsPEM) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		for i, pem := range cfg.CACertsPEM {
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--oidc-ca-cert #%d: no PEM certificate in it", i+1)
			}
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		client.Transport = tr
	}
	return &OIDC{cfg: cfg, client: client, iss: iss, users: users, log: log}, nil
}

// DisplayName is the provider's name on the login page.
func (o *OIDC) DisplayName() string { return o.cfg.DisplayName }

func (o *OIDC) discover(ctx context.Context) (*oidc.Provider, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider != nil {
		return o.provider, nil
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, o.client), o.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("discover the OIDC provider %s: %w", o.cfg.Issuer, err)
	}
	o.provider = p
	return p, nil
}

func (o *OIDC) oauth2Config(p *oidc.Provider) *oauth2.Config {
	scopes := []string{oidc.ScopeOpenID}
	if len(o.cfg.Scopes) == 0 {
		scopes = append(scopes, "profile", "email")
	}
	for _, s := range o.cfg.Scopes {
		if s != oidc.ScopeOpenID {
			scopes = append(scopes, s)
		}
	}
	return &oauth2.Config{
		ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret,
		Endpoint: p.Endpoint(), RedirectURL: o.cfg.ExternalURL + OIDCCallbackPath, Scopes: scopes,
	}
}

// oidcLogin is what the browser carries, in a cookie, to the identity
// provider and back. It needs no signature: the state must match the
// callback's, which only this browser's own login can give, and the rest is
// checked again at the callback.
type oidcLogin struct {
	State    string `json:"s"`
	Verifier string `json:"v"`
	Nonce    string `json:"n"`
	FlyPort  string `json:"p,omitempty"`
	Redirect string `json:"r,omitempty"`
	// TabNonce is the login page's: the page accepts the token handed back
	// only with the nonce that its own tab keeps for the login it began, so
	// a /login#token=… made elsewhere cannot replace the user's token.
	TabNonce string `json:"t,omitempty"`
}

var (
	flyPortRE  = regexp.MustCompile(`^[0-9]{1,5}$`)
	tabNonceRE = regexp.MustCompile(`^[A-Za-z0-9_-]{16,64}$`)
)

// safeRedirect keeps a redirect on this site, as the login page does.
func safeRedirect(r string) string {
	if strings.HasPrefix(r, "/") && !strings.HasPrefix(r, "//") && !strings.HasPrefix(r, "/\\") {
		return r
	}
	return ""
}

// Login answers GET OIDCLoginPath?fly_port=N&redirect=/path&tab_nonce=X:
// it sends the browser to the identity provider. tab_nonce comes back in
// the fragment beside the token.
func (o *OIDC) Login(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	l := oidcLogin{FlyPort: q.Get("fly_port"), Redirect: safeRedirect(q.Get("redirect")), TabNonce: q.Get("tab_nonce")}
	if l.FlyPort != "" && !flyPortRE.MatchString(l.FlyPort) {
		httpreply.Text(w, http.StatusBadRequest, fmt.Sprintf("fly_port %q is not a port number", l.FlyPort))
		return
	}
	if l.TabNonce != "" && !tabNonceRE.MatchString(l.TabNonce) {
		httpreply.Text(w, http.StatusBadRequest, "tab_nonce is not a nonce (16 to 64 of A-Z a-z 0-9 _ -)")
		return
	}
	p, err := o.discover(ctx)
	if err != nil {
		o.log.ErrorContext(ctx, "OIDC login failed", "err", err)
		httpreply.Text(w, http.StatusBadGateway, "the identity provider cannot be reached; try again later")
		return
	}
	l.State, l.Nonce, l.Verifier = rand.Text(), rand.Text(), oauth2.GenerateVerifier()
	raw, err := json.Marshal(l)
	if err != nil {
		httpreply.Internal(w, r, o.log, http.StatusInternalServerError, "OIDC login: encoding the login state", err)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: oidcCookie, Value: base64.RawURLEncoding.EncodeToString(raw), Path: OIDCCallbackPath,
		MaxAge: int(oidcLoginTTL.Seconds()), HttpOnly: true, Secure: strings.HasPrefix(o.cfg.ExternalURL, "https:"),
		// Lax: the provider's redirect back is a top-level GET, which
		// carries Lax cookies.
		SameSite: http.SameSiteLaxMode,
	})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, o.oauth2Config(p).AuthCodeURL(l.State, oidc.Nonce(l.Nonce), oauth2.S256ChallengeOption(l.Verifier)), http.StatusFound)
}

// Callback answers GET OIDCCallbackPath?code=C&state=S, where the identity
// provider sends the browser back: it checks the state, redeems the code
// (with the PKCE verifier), verifies the ID token and its nonce, records the
// user and mints a Porter token. The browser goes on to the login page with
// the token in the URL's fragment (never sent to a server), which keeps it as
// a local login's and hands it to fly when fly_port is set.
func (o *OIDC) Callback(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	w.Header().Set("Cache-Control", "no-store")
	fail := func(status int, msg string, err error) {
		o.log.InfoContext(ctx, "OIDC login refused", "reason", msg, "err", err)
		httpreply.Text(w, status, "single sign-on failed: "+msg)
	}
	c, err := r.Cookie(oidcCookie)
	if err != nil {
		fail(http.StatusBadRequest, "no login in progress in this browser (it took over 10 minutes, or cookies are off); start again", err)
		return
	}
	// The login state is good for one try.
	http.SetCookie(w, &http.Cookie{Name: oidcCookie, Path: OIDCCallbackPath, MaxAge: -1, HttpOnly: true})
	var l oidcLogin
	raw, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err == nil {
		err = json.Unmarshal(raw, &l)
	}
	if err != nil || l.State == "" || l.Verifier == "" || l.Nonce == "" {
		fail(http.StatusBadRequest, "the login state cookie is malformed; start again", err)
		return
	}
	q := r.URL.Query()
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(l.State)) != 1 {
		fail(http.StatusBadRequest, "the state does not match this browser's login; start again", nil)
		return
	}
	if e := q.Get("error"); e != "" {
		fail(http.StatusForbidden, fmt.Sprintf("the identity provider said %s: %s", e, q.Get("error_description")), nil)
		return
	}
	code := q.Get("code")
	if code == "" {
		fail(http.StatusBadRequest, "the identity provider sent no code", nil)
		return
	}
	p, err := o.discover(ctx)
	if err != nil {
		fail(http.StatusBadGateway, "the identity provider cannot be reached", err)
		return
	}
	cctx := oidc.ClientContext(ctx, o.client)
	tok, err := o.oauth2Config(p).Exchange(cctx, code, oauth2.VerifierOption(l.Verifier))
	if err != nil {
		fail(http.StatusBadGateway, "redeeming the code at the identity provider failed", err)
		return
	}
	rawID, _ := tok.Extra("id_token").(string)
	if rawID == "" {
		fail(http.StatusBadGateway, "the identity provider sent no ID token", nil)
		return
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: o.cfg.ClientID}).Verify(cctx, rawID)
	if err != nil {
		fail(http.StatusForbidden, "the ID token is not valid", err)
		return
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(l.Nonce)) != 1 {
		fail(http.StatusForbidden, "the ID token's nonce does not match this login", nil)
		return
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		fail(http.StatusForbidden, "the ID token's claims cannot be read", err)
		return
	}
	id, err := IdentityFromClaims(claims, o.cfg.UserNameKey, o.cfg.GroupsKey)
	if err != nil {
		fail(http.StatusForbidden, err.Error(), nil)
		return
	}
	if err := o.users.SaveSSOUser(ctx, OIDCConnector, id); err != nil {
		o.log.ErrorContext(ctx, "OIDC login failed: recording the user", "user", id.UserName, "err", err)
		httpreply.Text(w, http.StatusServiceUnavailable, "the user store is unavailable; try again")
		return
	}
	access, _, claimsOut, err := mint(ctx, o.iss, o.users, o.log, Claims{
		UserID: id.UserID, Name: id.Name, UserName: id.UserName, Email: id.Email, Connector: OIDCConnector,
	})
	if err != nil {
		o.log.ErrorContext(ctx, "OIDC login failed", "user", id.UserName, "err", err)
		httpreply.Text(w, http.StatusInternalServerError, "issuing the token failed; try again")
		return
	}
	o.log.InfoContext(ctx, "logged in", "connector", OIDCConnector, "user", id.UserName, "groups", id.Groups, "expires", claimsOut.Expiry)
	next := url.Values{}
	if l.FlyPort != "" {
		next.Set("fly_port", l.FlyPort)
	}
	if l.Redirect != "" {
		next.Set("redirect", l.Redirect)
	}
	target := "/login"
	if len(next) > 0 {
		target += "?" + next.Encode()
	}
	frag := url.Values{"token": {access}}
	if l.TabNonce != "" {
		frag.Set("tab_nonce", l.TabNonce)
	}
	http.Redirect(w, r, target+"#"+frag.Encode(), http.StatusFound)
}

// mint issues a token for c with the user's session now (its generation and
// roles), notes the login for `fly active-users` and, when users keeps
// access tokens, returns an opaque one standing for the signed token.
func mint(ctx context.Context, iss *Issuer, users Sessions, log *slog.Logger, c Claims) (access, signed string, out Claims, err error) {
	sess, err := users.Session(ctx, c.Connector, c.UserID)
	if err != nil {
		return "", "", Claims{}, fmt.Errorf("read the user's session: %w", err)
	}
	// The token carries the teams at login for what reads tokens as dex's;
	// Authenticate reads the roles afresh on every request.
	c.Teams, c.Generation = sess.Teams, sess.Generation
	token, out, err := iss.issue(c)
	if err != nil {
		return "", "", Claims{}, fmt.Errorf("issue the token: %w", err)
	}
	if rec, ok := users.(LoginRecorder); ok {
		// Only for `fly active-users`: a failure does not undo the login.
		if err := rec.RecordLogin(ctx, c.Connector, c.displayUserID(), iss.now()); err != nil {
			log.WarnContext(ctx, "recording a login", "user", c.displayUserID(), "err", err)
		}
	}
	at, ok := users.(AccessTokens)
	if !ok {
		return token, token, out, nil
	}
	opaque, hash, err := newOpaqueToken(out.Expiry)
	if err == nil {
		err = at.SaveAccessToken(ctx, hash, token, out.Expiry)
	}
	if err != nil {
		return "", "", Claims{}, fmt.Errorf("save the access token: %w", err)
	}
	return opaque, token, out, nil
}
