package atc

import (
	"context"
	"fmt"
	"time"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/podspec"
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

func (c StepCredentialsConfig) issuer(store blobstore.Config, auditBucket string) (stepcreds.Issuer, error) {
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

// stepScope is what the step of a may touch in the bucket.
func stepScope(a *action.Action, w podspec.Worker) stepcreds.Scope {
	sc := stepcreds.Scope{Team: a.Build.Team, BuildID: a.Build.ID, StepID: a.StepID}
	for _, in := range a.Inputs {
		sc.Inputs = append(sc.Inputs, in.Key)
	}
	for _, c := range a.Caches {
		sc.Caches = append(sc.Caches, c.Key)
	}
	if a.Timeout.Duration > 0 {
		allowance := w.UploadAllowance
		if allowance <= 0 {
			allowance = podspec.DefaultUploadAllowance
		}
		sc.Lifetime = a.Timeout.Duration + allowance + a.KeepAlive.Duration
	} else {
		sc.Lifetime = time.Duration(1<<63 - 1) // no timeout: as long as allowed
	}
	return sc
}

// mintStepCredentials fills s with the step's own blobstore credentials.
func (s *Server) mintStepCredentials(ctx context.Context, a *action.Action, w podspec.Worker, given *podspec.Secrets) error {
	c, err := s.stepCreds.Issue(ctx, stepScope(a, w))
	if err != nil {
		return fmt.Errorf("blobstore credentials for step %s: %w", a.StepID, err)
	}
	given.BlobstoreAccessKey, given.BlobstoreSecretKey, given.BlobstoreSessionToken = c.AccessKey, c.SecretKey, c.SessionToken
	return nil
}
