// Package stepcreds issues each step pod its own blobstore credentials,
// limited to what that step may touch: its inputs and task caches to read,
// its own blob prefix, audit staging prefix and caches to write. Nothing in
// the audit trail: the server seals a step's staged audit objects there
// once the step has ended (auditseal.Sealer). The server's key never
// enters a pod.
package stepcreds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/porter-ci/porter/pkg/auditseal"
	"github.com/porter-ci/porter/pkg/blobstore"
)

// Scope is what one step may touch in the bucket.
type Scope struct {
	Team    string
	BuildID string
	StepID  string
	// Inputs are the keys the step reads.
	Inputs []string
	// Caches are the task cache keys the step restores and saves.
	Caches []string
	// Lifetime is how long the step may need its credentials.
	Lifetime time.Duration
}

// Credentials are what a step signs its requests with.
type Credentials struct {
	AccessKey    string
	SecretKey    string
	SessionToken string // empty for static keys
	Expiration   time.Time
}

// Issuer mints a step's credentials.
type Issuer interface {
	Issue(ctx context.Context, s Scope) (Credentials, error)
}

// Static hands every step the same key: for stores without STS. It is
// the old, unsafe behaviour and must be asked for (--step-credentials=static).
type Static struct{ AccessKey, SecretKey string }

// Issue implements Issuer.
func (s Static) Issue(context.Context, Scope) (Credentials, error) {
	return Credentials{AccessKey: s.AccessKey, SecretKey: s.SecretKey}, nil
}

// STS asks an STS endpoint (MinIO's, or AWS's with RoleARN) for temporary
// credentials restricted by a session policy built from the Scope.
type STS struct {
	// Endpoint is the STS URL, e.g. http://minio:9000 or https://sts.amazonaws.com.
	Endpoint  string
	AccessKey string
	SecretKey string
	// RoleARN is required by AWS, ignored by MinIO.
	RoleARN string
	// Region is AWS STS's location.
	Region string
	// Bucket holds artifacts, caches and staged audit objects,
	// AuditBucket the audit trail, which steps are denied (empty: Bucket).
	Bucket, AuditBucket string
	// MinLifetime and MaxLifetime (default 12 h) bound the credentials'
	// duration, whatever the step's: STS refuses less than 15 minutes, and
	// AWS more than 12 h for a role.
	MinLifetime, MaxLifetime time.Duration
	Client                   *http.Client
}

// Issue implements Issuer.
func (s STS) Issue(ctx context.Context, sc Scope) (Credentials, error) {
	policy, err := Policy(s.Bucket, s.AuditBucket, sc)
	if err != nil {
		return Credentials{}, err
	}
	longest := s.MaxLifetime
	if longest <= 0 {
		longest = 12 * time.Hour
	}
	lifetime := min(max(sc.Lifetime, s.MinLifetime, 15*time.Minute), max(longest, 15*time.Minute))
	creds, err := credentials.NewSTSAssumeRole(s.Endpoint, credentials.STSAssumeRoleOptions{
		AccessKey: s.AccessKey, SecretKey: s.SecretKey, Policy: string(policy),
		DurationSeconds: int(lifetime.Seconds()), RoleARN: s.RoleARN, Location: s.Region,
		RoleSessionName: "porter-step-" + sc.StepID,
	})
	if err != nil {
		return Credentials{}, fmt.Errorf("step credentials: %w", err)
	}
	v, err := creds.GetWithContext(&credentials.CredContext{Client: s.Client, Context: ctx})
	if err != nil {
		return Credentials{}, fmt.Errorf("step credentials from %s: %w", s.Endpoint, err)
	}
	return Credentials{AccessKey: v.AccessKeyID, SecretKey: v.SecretAccessKey, SessionToken: v.SessionToken, Expiration: v.Expiration}, nil
}

// MaxPolicySize is the largest session policy STS takes (AWS's packed
// limit is similar; MinIO's is 2048 characters of compact JSON).
const MaxPolicySize = 2048

type statement struct {
	Effect   string   `json:"Effect"`
	Action   []string `json:"Action"`
	Resource []string `json:"Resource"`
}

type document struct {
	Version   string      `json:"Version"`
	Statement []statement `json:"Statement"`
}

// ErrPolicyTooLarge is returned when even the widest allowed grouping of a
// step's keys does not fit a session policy.
var ErrPolicyTooLarge = errors.New("step credentials: session policy too large")

// Policy is the session policy of a step. Reads are per key; when a step
// has so many inputs and caches that the policy would not fit, keys are
// grouped by the prefix of the step that wrote them, then by team: never
// wider than the step's own team.
func Policy(bucket, auditBucket string, sc Scope) ([]byte, error) {
	if auditBucket == "" {
		auditBucket = bucket
	}
	if sc.Team == "" || sc.BuildID == "" || sc.StepID == "" {
		return nil, fmt.Errorf("step credentials: scope needs a team, a build and a step (got %q, %q, %q)", sc.Team, sc.BuildID, sc.StepID)
	}
	var last []byte
	for _, widen := range []func(string, string) string{exact, byWriter, byTeam} {
		doc := build(bucket, auditBucket, sc, widen)
		b, err := json.Marshal(doc)
		if err != nil {
			return nil, err
		}
		if len(b) <= MaxPolicySize {
			return b, nil
		}
		last = b
	}
	return nil, fmt.Errorf("%w: %d bytes for %d inputs and %d caches, over %d", ErrPolicyTooLarge, len(last), len(sc.Inputs), len(sc.Caches), MaxPolicySize)
}

func build(bucket, auditBucket string, sc Scope, widen func(team, key string) string) document {
	arn := func(key string) string { return "arn:aws:s3:::" + bucket + "/" + key }
	own := []string{
		arn(blobstore.BlobPrefix(sc.Team, sc.StepID) + "*"),
		arn(auditseal.StagedKey(sc.BuildID, sc.StepID, "*")),
	}
	var reads, caches []string
	for _, k := range sc.Inputs {
		reads = appendNew(reads, arn(widen(sc.Team, k)))
	}
	for _, k := range sc.Caches {
		caches = appendNew(caches, arn(widen(sc.Team, k)))
	}
	doc := document{Version: "2012-10-17", Statement: []statement{
		// minio-go asks for the bucket's location when no region is set.
		{Effect: "Allow", Action: []string{"s3:GetBucketLocation"}, Resource: []string{"arn:aws:s3:::" + bucket}},
		// The staged audit objects are written once: the sidecar checks first.
		{Effect: "Allow", Action: []string{"s3:GetObject"}, Resource: slices.Concat(reads, caches, own[1:])},
		{Effect: "Allow", Action: []string{"s3:PutObject", "s3:AbortMultipartUpload"}, Resource: slices.Concat(own, caches)},
		// Nothing above reaches the audit trail; the deny keeps it so
		// whatever a later grant says (the bucket may be the artifacts' too).
		{Effect: "Deny", Action: []string{"s3:*"}, Resource: []string{"arn:aws:s3:::" + auditBucket + "/" + blobstore.AuditTrailPrefix + "*"}},
	}}
	return doc
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// exact grants the key itself.
func exact(_, key string) string { return key }

// byWriter grants what the key's writer wrote: a blob's step prefix, a
// cache's job.
func byWriter(team, key string) string {
	if dir := blobstore.TeamBlobPrefix(team); strings.HasPrefix(key, dir) {
		if writer, _, ok := strings.Cut(strings.TrimPrefix(key, dir), "/"); ok {
			return dir + writer + "/*"
		}
	}
	if strings.HasPrefix(key, "task-caches/") {
		return path.Dir(key) + "/*"
	}
	return key
}

// byTeam grants the team's blobs or caches.
func byTeam(team, key string) string {
	if strings.HasPrefix(key, blobstore.TeamBlobPrefix(team)) {
		return blobstore.TeamBlobPrefix(team) + "*"
	}
	if dir := "task-caches/" + team + "/"; strings.HasPrefix(key, dir) {
		return dir + "*"
	}
	return key
}
