// Package atcclient is a typed HTTP client for the part of Concourse's API
// that fly speaks and that Porter's server answers: info, login, teams,
// one-off builds and their event streams, artifacts, containers (for
// intercept), plus Porter's own audit route. It is what the
// atc-porter-runtime client commands use, so that they work against Porter
// and Concourse alike.
package atcclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
)

// DefaultTeam is the team a target uses when none is named, as in fly.
const DefaultTeam = "main"

// Options say which server to reach and how.
type Options struct {
	// URL is the server's base URL, e.g. "https://ci.example.com".
	URL string
	// Team is the default team of team routes; empty means DefaultTeam.
	Team string
	// Token is the bearer token; empty for info and login only.
	Token string
	// HTTPClient reaches the server; nil means one built from TLSConfig.
	// It must not have a Timeout: event streams and artifact transfers
	// last as long as they need; bound them with the context instead.
	HTTPClient *http.Client
	// TLSConfig is used when HTTPClient is nil, and for intercept's
	// WebSocket either way.
	TLSConfig *tls.Config
	// Logger gets debug lines (reconnects); nil means slog.Default().
	Logger *slog.Logger
}

// Client talks to one server as one user. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	team  string
	token string
	http  *http.Client
	tls   *tls.Config
	log   *slog.Logger
}

// New returns a client for the server that opts names.
func New(opts Options) (*Client, error) {
	u, err := url.Parse(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("parse server URL %q: %w", opts.URL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("server URL %q: scheme must be http or https", opts.URL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("server URL %q: no host", opts.URL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	c := &Client{base: u, team: opts.Team, token: opts.Token, http: opts.HTTPClient, tls: opts.TLSConfig, log: opts.Logger}
	if c.team == "" {
		c.team = DefaultTeam
	}
	if c.http == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = opts.TLSConfig
		c.http = &http.Client{Transport: t}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

// URL is the server's base URL.
func (c *Client) URL() string { return c.base.String() }

// Team is the client's default team.
func (c *Client) Team() string { return c.team }

// BuildURL is the web page of a build, which is what fly shows a person.
func (c *Client) BuildURL(id int64) string { return fmt.Sprintf("%s/builds/%d", c.URL(), id) }

func (c *Client) url(path string) string { return c.base.String() + path }

// AuthHeader is the Authorization header of the client's token, for
// requests made outside the client (intercept's WebSocket).
func (c *Client) AuthHeader() http.Header {
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	return h
}

// TLSConfig is the TLS configuration the client was given, if any.
func (c *Client) TLSConfig() *tls.Config { return c.tls }

// Error is the server's answer with an error status.
type Error struct {
	// Op is what the client was doing, e.g. "create build".
	Op         string
	StatusCode int
	// Message is the server's message (its JSON "error" or "errors", or the
	// start of the body).
	Message string
}

func (e *Error) Error() string {
	var hint string
	switch e.StatusCode {
	case http.StatusUnauthorized:
		hint = "not authorized: not logged in or the token expired; log in again"
	case http.StatusForbidden:
		hint = "forbidden: the token's teams do not include this"
	default:
		hint = fmt.Sprintf("%d %s", e.StatusCode, http.StatusText(e.StatusCode))
	}
	if e.Message == "" {
		return fmt.Sprintf("%s: %s", e.Op, hint)
	}
	return fmt.Sprintf("%s: %s: %s", e.Op, hint, e.Message)
}

func hasStatus(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.StatusCode == code
}

// IsUnauthorized reports whether err is the server's 401: no token, or one
// that expired.
func IsUnauthorized(err error) bool { return hasStatus(err, http.StatusUnauthorized) }

// IsForbidden reports whether err is the server's 403: another team's thing.
func IsForbidden(err error) bool { return hasStatus(err, http.StatusForbidden) }

// IsNotFound reports whether err is the server's 404.
func IsNotFound(err error) bool { return hasStatus(err, http.StatusNotFound) }

// maxErrorBody bounds what is read of an error answer.
const maxErrorBody = 64 << 10

// readError reads the error answer resp and closes its body.
func readError(op string, resp *http.Response) error {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return ErrorFromBody(op, resp.StatusCode, body)
}

// ErrorFromBody is the error of an answer with this status and body: the
// server's message, whichever of its shapes it came in.
func ErrorFromBody(op string, statusCode int, body []byte) *Error {
	e := &Error{Op: op, StatusCode: statusCode}
	// Porter answers {"error": "..."}, Concourse {"errors": ["..."]}, a
	// 404 in Concourse's JSON-API shape {"errors": [{"detail": "..."}]},
	// or text.
	var j struct {
		Error  string            `json:"error"`
		Errors []json.RawMessage `json:"errors"`
	}
	var msgs []string
	if json.Unmarshal(body, &j) == nil {
		for _, raw := range j.Errors {
			var text string
			var obj struct {
				Title  string `json:"title"`
				Detail string `json:"detail"`
			}
			switch {
			case json.Unmarshal(raw, &text) == nil && text != "":
				msgs = append(msgs, text)
			case json.Unmarshal(raw, &obj) == nil && obj.Detail != "":
				msgs = append(msgs, obj.Detail)
			case obj.Title != "":
				msgs = append(msgs, obj.Title)
			}
		}
	}
	switch {
	case j.Error != "":
		e.Message = j.Error
	case len(msgs) > 0:
		e.Message = strings.Join(msgs, "; ")
	default:
		// Not JSON (a proxy's page, say): the first line is the best hint.
		line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		if len(line) > 200 {
			line = line[:200] + "..."
		}
		e.Message = line
	}
	return e
}

// request is one API call.
type request struct {
	op     string
	method string
	path   string
	query  url.Values
	// json is encoded as the body when body is nil.
	json        any
	body        io.Reader
	contentType string
	// noAuth leaves the token out (info, login).
	noAuth bool
}

// send makes the request and returns the response of a 2xx answer; any
// other status becomes an *Error. The caller closes the body.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	return c.sendHeader(ctx, r, nil)
}

// sendHeader is send with extra request headers; empty values are left out.
func (c *Client) sendHeader(ctx context.Context, r request, header http.Header) (*http.Response, error) {
	body, contentType := r.body, r.contentType
	if body == nil && r.json != nil {
		data, err := json.Marshal(r.json)
		if err != nil {
			return nil, fmt.Errorf("%s: encode request: %w", r.op, err)
		}
		body, contentType = bytes.NewReader(data), "application/json"
	}
	u := c.url(r.path)
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.op, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, vs := range header {
		for _, v := range vs {
			if v != "" {
				req.Header.Add(k, v)
			}
		}
	}
	if !r.noAuth && c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.op, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, readError(r.op, resp)
	}
	return resp, nil
}

// do makes the request and decodes a JSON answer into out (nil: discard).
func (c *Client) do(ctx context.Context, r request, out any) error {
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: decode answer: %w", r.op, err)
	}
	return nil
}

// Info is GET /api/v1/info; it needs no token.
func (c *Client) Info(ctx context.Context) (concourse.Info, error) {
	var info concourse.Info
	err := c.do(ctx, request{op: "get server info", method: http.MethodGet, path: "/api/v1/info", noAuth: true}, &info)
	return info, err
}

// Token is a login's answer.
type Token struct {
	// Type is the token type as the server names it ("bearer"); fly saves
	// it in ~/.flyrc as is.
	Type  string
	Value string
	// Expiry is when the token stops working; zero if the server did not say.
	Expiry time.Time
}

// Login trades a user name and password for a token: fly's password grant,
// POST /sky/issuer/token with fly's client credentials.
func (c *Client) Login(ctx context.Context, username, password string) (Token, error) {
	const op = "log in"
	form := url.Values{
		"grant_type": {"password"},
		"username":   {username},
		"password":   {password},
		"scope":      {"openid profile email federated:id groups"},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url("/sky/issuer/token"), strings.NewReader(form.Encode()))
	if err != nil {
		return Token{}, fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	// fly's OAuth client: id "fly", secret "Zmx5".
	req.SetBasicAuth("fly", "Zmx5")
	now := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return Token{}, fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err != nil {
		return Token{}, fmt.Errorf("%s: read answer: %w", op, err)
	}
	// The token endpoint answers OAuth2 errors: {"error": "invalid_grant",
	// "error_description": "..."}, usually with 401.
	var t struct {
		AccessToken      string `json:"access_token"`
		TokenType        string `json:"token_type"`
		ExpiresIn        int64  `json:"expires_in"`
		Error            string `json:"error"`
		ErrorDescription string `json:"error_description"`
	}
	_ = json.Unmarshal(body, &t)
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(t.ErrorDescription)
		if msg == "" {
			msg = t.Error
		}
		if msg == "" {
			msg, _, _ = strings.Cut(strings.TrimSpace(string(body)), "\n")
		}
		return Token{}, &Error{Op: op, StatusCode: resp.StatusCode, Message: msg}
	}
	if t.AccessToken == "" {
		return Token{}, fmt.Errorf("%s: the server answered without an access token", op)
	}
	tok := Token{Type: t.TokenType, Value: t.AccessToken}
	if tok.Type == "" {
		tok.Type = "bearer"
	}
	if t.ExpiresIn > 0 {
		tok.Expiry = now.Add(time.Duration(t.ExpiresIn) * time.Second)
	}
	return tok, nil
}

// UserInfo is GET /api/v1/user.
func (c *Client) UserInfo(ctx context.Context) (concourse.UserInfo, error) {
	var u concourse.UserInfo
	err := c.do(ctx, request{op: "get user info", method: http.MethodGet, path: "/api/v1/user"}, &u)
	return u, err
}

// Teams is GET /api/v1/teams: the teams the token may see.
func (c *Client) Teams(ctx context.Context) ([]concourse.Team, error) {
	var ts []concourse.Team
	err := c.do(ctx, request{op: "list teams", method: http.MethodGet, path: "/api/v1/teams"}, &ts)
	return ts, err
}

// teamPath is /api/v1/teams/{team}, the client's team when team is empty.
func (c *Client) teamPath(team string) string {
	if team == "" {
		team = c.team
	}
	return "/api/v1/teams/" + url.PathEscape(team)
}
