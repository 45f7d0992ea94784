package atc

import (
	"fmt"
	"time"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/stepcreds"
)

// Modes of --step-credentials.
const (
	StepCredentialsSTS    = "sts"
	StepCredentialsStatic = "static"
)

// StepCredentialsConfig says how step pods get their blobstore credentials.
type StepCredentialsConfig struct {
	// Mode is "sts" (default: temporary credentials limited to the step's
	// keys) or "static" (the server's own key, for stores without STS).
	Mode string
	// STSEndpoint is the STS URL (default: the blobstore endpoint, as MinIO
	// serves STS there); RoleARN and Region are AWS's.
	STSEndpoint string
	RoleARN     string
	Region      string
	// MaxLifetime caps the credentials' duration; a step that outlives them
	// can no longer store its outputs.
	MaxLifetime time.Duration
}

// DefaultStepCredentialsMaxLifetime is AWS's longest role session.
const DefaultStepCredentialsMaxLifetime = 12 * time.Hour

// Issuer mints step pods' blobstore credentials as c says: static (the
// server's key) or STS (each step's own, limited to its keys).
func (c StepCredentialsConfig) Issuer(store blobstore.Config, auditBucket string) (stepcreds.Issuer, error) {
	switch c.Mode {
	case StepCredentialsStatic:
		return stepcreds.Static{AccessKey: store.AccessKey, SecretKey: store.SecretKey}, nil
	case StepCredentialsSTS, "":
	default:
		return nil, fmt.Errorf("--step-credentials %q: want %q or %q", c.Mode, StepCredentialsSTS, StepCredentialsStatic)
	}
	client, err := store.HTTPClient()
	if err != nil {
		return nil, fmt.Errorf("step credentials: %w", err)
	}
	endpoint := c.STSEndpoint
	if endpoint == "" {
		endpoint = store.URL()
	}
	return stepcreds.STS{Endpoint: endpoint, AccessKey: store.AccessKey, SecretKey: store.SecretKey, RoleARN: c.RoleARN,
		Region: c.Region, Bucket: store.Bucket, AuditBucket: auditBucket, MaxLifetime: c.MaxLifetime, Client: client}, nil
}
