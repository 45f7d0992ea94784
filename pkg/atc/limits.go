package atc

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

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
	defaultMaxArtifactUpload = 10 << 30
	// Pipeline configs are the largest bodies besides uploads (maxConfigSize).
	defaultMaxRequestBody  = 8 << 20
	defaultHTTPReadTimeout = time.Minute
	defaultHTTPIdleTimeout = 2 * time.Minute
	// readHeaderTimeout bounds a client that sends its headers slowly.
	readHeaderTimeout = 10 * time.Second
)

func (c LimitsConfig) withDefaults() LimitsConfig {
	if c.MaxArtifactUpload <= 0 {
		c.MaxArtifactUpload = defaultMaxArtifactUpload
	}
	if c.MaxRequestBody <= 0 {
		c.MaxRequestBody = defaultMaxRequestBody
	}
	c.Upload = c.Upload.WithDefaults()
	if c.HTTPReadTimeout <= 0 {
		c.HTTPReadTimeout = defaultHTTPReadTimeout
	}
	if c.HTTPIdleTimeout <= 0 {
		c.HTTPIdleTimeout = defaultHTTPIdleTimeout
	}
	return c
}

func limitFlags(fs *flag.FlagSet, c *LimitsConfig) {
	c.MaxArtifactUpload, c.MaxRequestBody = defaultMaxArtifactUpload, defaultMaxRequestBody
	c.GRPC.Unsynced = stepserver.DefaultLimits.Unsynced
	fs.Var((*byteSize)(&c.MaxArtifactUpload), "max-artifact-upload", "largest `fly execute -i` upload accepted, as sent (e.g. 10Gi, 500Mi)")
	c.Upload = upload.Limits{}.WithDefaults()
	fs.Var((*byteSize)(&c.Upload.MaxInflated), upload.FlagMaxInflated, "most bytes of tar one `fly execute -i` upload may inflate to (e.g. 1Gi, 4Gi)")
	fs.Func(upload.FlagMaxEntries, fmt.Sprintf("most files, directories and links in one `fly execute -i` upload (default %d)", upload.DefaultMaxEntries), func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive number, got %q", v)
		}
		c.Upload.MaxEntries = n
		return nil
	})
	fs.Var((*byteSize)(&c.MaxRequestBody), "max-request-body", "largest body of any other API request (e.g. 8Mi)")
	fs.DurationVar(&c.HTTPReadTimeout, "http-read-timeout", defaultHTTPReadTimeout, "how long reading an API request may take (an upload: each read)")
	fs.DurationVar(&c.HTTPIdleTimeout, "http-idle-timeout", defaultHTTPIdleTimeout, "how long an idle keep-alive API connection is kept")
	fs.DurationVar(&c.GRPC.Hello, "grpc-hello-timeout", stepserver.DefaultLimits.Hello, "how long a sidecar connection may take to say which step it is before it is closed")
	fs.IntVar(&c.GRPC.StreamsPerStep, "grpc-max-streams-per-step", stepserver.DefaultLimits.StreamsPerStep, "most streams one step's sidecar may hold at once")
	fs.Func("grpc-max-concurrent-streams", fmt.Sprintf("most streams on one sidecar connection (default %d)", stepserver.DefaultLimits.StreamsPerConn), func(v string) error {
		var n uint32
		if _, err := fmt.Sscan(v, &n); err != nil || n == 0 {
			return fmt.Errorf("want a positive number, got %q", v)
		}
		c.GRPC.StreamsPerConn = n
		return nil
	})
	fs.Var((*byteSize)(&c.GRPC.Unsynced), "grpc-max-unsynced-bytes", "most event bytes taken from all sidecars and not yet durable; past it, events wait in the sidecars (e.g. 32Mi)")
}

// byteSize is a flag of bytes written as a Kubernetes quantity (10Gi, 500M, 1024).
type byteSize int64

func (b *byteSize) String() string {
	return resource.NewQuantity(int64(*b), resource.BinarySI).String()
}

func (b *byteSize) Set(v string) error {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return fmt.Errorf("want a size such as 10Gi or 500Mi: %w", err)
	}
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return fmt.Errorf("want a positive whole number of bytes, got %q", v)
	}
	*b = byteSize(n)
	return nil
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
