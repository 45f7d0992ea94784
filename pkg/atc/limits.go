package atc

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/porter-ci/porter/pkg/stepserver"
	"github.com/porter-ci/porter/pkg/upload"
)

// LimitsConfig bounds what clients can hold on the server: request bodies,
// slow HTTP clients, sidecar streams.
type LimitsConfig struct {
	// MaxArtifactUpload bounds one `fly execute -i` upload (as sent:
	// tar+gzip); MaxRequestBody any other request's body.
	MaxArtifactUpload int64
	MaxRequestBody    int64
	// Upload caps what an upload inflates to (checked as it streams).
	Upload upload.Limits
	// HTTPReadTimeout bounds reading a request (an upload: the wait for
	// each read, so a large upload on a slow link still goes through);
	// HTTPIdleTimeout a keep-alive connection with no request.
	HTTPReadTimeout time.Duration
	HTTPIdleTimeout time.Duration
	// GRPC are the sidecar stream's limits.
	GRPC stepserver.Limits
}

// Default limits (the flags' defaults).
const (
	DefaultMaxArtifactUpload = 10 << 30
	// Pipeline configs are the largest bodies besides uploads (maxConfigSize).
	DefaultMaxRequestBody  = 8 << 20
	DefaultHTTPReadTimeout = time.Minute
	DefaultHTTPIdleTimeout = 2 * time.Minute
	// readHeaderTimeout bounds a client that sends its headers slowly.
	readHeaderTimeout = 10 * time.Second
)

func (c LimitsConfig) withDefaults() LimitsConfig {
	if c.MaxArtifactUpload <= 0 {
		c.MaxArtifactUpload = DefaultMaxArtifactUpload
	}
	if c.MaxRequestBody <= 0 {
		c.MaxRequestBody = DefaultMaxRequestBody
	}
	c.Upload = c.Upload.WithDefaults()
	if c.HTTPReadTimeout <= 0 {
		c.HTTPReadTimeout = DefaultHTTPReadTimeout
	}
	if c.HTTPIdleTimeout <= 0 {
		c.HTTPIdleTimeout = DefaultHTTPIdleTimeout
	}
	return c
}

// apiServer is the HTTP server of the API's routes, within the limits;
// its requests' contexts derive from base.
func (s *Server) apiServer(base context.Context, routes http.Handler) *http.Server {
	return &http.Server{
		Handler:           routes,
		ReadHeaderTimeout: readHeaderTimeout,
		// Uploads move their deadline along (stallReader); event streams
		// and intercept websockets are not cut by it (net/http clears the
		// deadline once the request is read, and on hijack).
		ReadTimeout: s.cfg.Limits.HTTPReadTimeout,
		IdleTimeout: s.cfg.Limits.HTTPIdleTimeout,
		BaseContext: func(net.Listener) context.Context { return base },
	}
}
