// Package atcclient is a typed HTTP client for the ATC runtime's API (see
// package api): builds, their event streams, and artifact uploads and
// downloads.
package atcclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/porter-ci/porter/pkg/api"
)

// Client talks to one ATC. It is safe for concurrent use.
type Client struct {
	base *url.URL
	http *http.Client
	log  *slog.Logger
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client. It must not have a Timeout: event
// streams and artifact transfers last as long as they need; bound them with
// the context instead.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithLogger sets the logger for reconnects and other things worth a debug line.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// New returns a client for the ATC at baseURL, e.g. "http://127.0.0.1:8080".
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("ATC URL %q: %w", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("ATC URL %q: scheme must be http or https", baseURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("ATC URL %q: no host", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	c := &Client{base: u, http: http.DefaultClient, log: slog.Default()}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// URL is the ATC's base URL.
func (c *Client) URL() string { return c.base.String() }

// BuildURL is the URL of a build's resource, which is what a person is
// shown to find the build again.
func (c *Client) BuildURL(id int64) string { return c.url(api.BuildPath(id)) }

func (c *Client) url(path string) string { return c.base.String() + path }

// StatusError is an answer of the ATC with an error status.
type StatusError struct {
	// Op is what the client was doing, e.g. "create build".
	Op string
	// StatusCode and Status are the HTTP status ("400 Bad Request").
	StatusCode int
	Status     string
	// Message is the server's {"error": ...} message, or the start of the
	// body when it was not one.
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%s: %s", e.Op, e.Status)
	}
	return fmt.Sprintf("%s: %s: %s", e.Op, e.Status, e.Message)
}

// IsNotFound reports whether err is the ATC's 404.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.StatusCode == http.StatusNotFound
}

// maxErrorBody bounds what is read of an error answer.
const maxErrorBody = 64 << 10

// statusError reads the error answer resp and closes its body.
func statusError(op string, resp *http.Response) error {
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	se := &StatusError{Op: op, StatusCode: resp.StatusCode, Status: resp.Status}
	var e api.Error
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		se.Message = e.Error
	} else {
		// Not our JSON (a proxy's page, say): the first line is the best hint.
		line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		if len(line) > 200 {
			line = line[:200] + "..."
		}
		se.Message = line
	}
	return se
}

// do sends a JSON request (in may be nil) and decodes a JSON answer into
// out (which may be nil). Any 2xx is success: the contract names the exact
// code, but a client has nothing to gain from refusing another success.
func (c *Client) do(ctx context.Context, op, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: encode request: %w", op, err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path), body)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if resp.StatusCode/100 != 2 {
		return statusError(op, resp)
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: decode answer: %w", op, err)
	}
	return nil
}

// CreateBuild starts a one-off build: POST /api/v1/builds.
func (c *Client) CreateBuild(ctx context.Context, req api.CreateBuildRequest) (api.Build, error) {
	var b api.Build
	err := c.do(ctx, "create build", http.MethodPost, "/api/v1/builds", req, &b)
	return b, err
}

// Builds lists the builds, newest first: GET /api/v1/builds.
func (c *Client) Builds(ctx context.Context) ([]api.Build, error) {
	var bs []api.Build
	err := c.do(ctx, "list builds", http.MethodGet, "/api/v1/builds", nil, &bs)
	return bs, err
}

// Build gets one build: GET /api/v1/builds/{id}.
func (c *Client) Build(ctx context.Context, id int64) (api.Build, error) {
	var b api.Build
	err := c.do(ctx, "get build "+strconv.FormatInt(id, 10), http.MethodGet, api.BuildPath(id), nil, &b)
	return b, err
}

// AbortBuild asks the ATC to abort a build: PUT /api/v1/builds/{id}/abort.
// The build ends later; its event stream says when.
func (c *Client) AbortBuild(ctx context.Context, id int64) error {
	return c.do(ctx, "abort build "+strconv.FormatInt(id, 10), http.MethodPut, api.BuildPath(id)+"/abort", nil, nil)
}

// Audit reads a build's audit trail: GET /api/v1/builds/{id}/audit.
func (c *Client) Audit(ctx context.Context, id int64) (api.Audit, error) {
	var a api.Audit
	err := c.do(ctx, "audit build "+strconv.FormatInt(id, 10), http.MethodGet, api.BuildPath(id)+"/audit", nil, &a)
	return a, err
}
