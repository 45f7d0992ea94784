package blobstore

import (
	"fmt"
	"path"
	"strings"

	"github.com/google/uuid"
)

// Object layout (see DESIGN.md). Keys are built only here.
//
// An artifact's bytes are written once, straight to a key nobody else
// writes (a blob); its content address is a small manifest naming the blob.
// Nothing is copied after upload: a server-side copy would rewrite every
// byte. Each step writes only under its own blob prefix, which is what its
// scoped credentials allow.

// BlobPrefix is where the uploads of one writer of team's (a step ID, or
// the ATC's own) go.
func BlobPrefix(team, owner string) string { return TeamBlobPrefix(team) + owner + "/" }

// TeamBlobPrefix holds every blob of team's.
func TeamBlobPrefix(team string) string { return "blobs/" + team + "/" }

// NewBlobKey is a fresh, never reused key under BlobPrefix(team, owner).
func NewBlobKey(team, owner string) string {
	return BlobPrefix(team, owner) + uuid.NewString() + ".tar.zst"
}

// ATCBlobOwner is the owner of the blobs the ATC uploads itself (`fly
// execute -i`).
const ATCBlobOwner = "_atc"

// ManifestKey is the content address of an artifact of team's whose
// stored (compressed) stream has the given "sha256:<hex>" digest. Manifests
// are per team: a step can only ever claim a digest within its own team.
func ManifestKey(team, digest string) string {
	return "artifacts/" + team + "/" + strings.TrimPrefix(digest, "sha256:") + ".json"
}

// TaskCacheKey is the key of a task cache for one job/step/path.
func TaskCacheKey(team, pipeline, job, step, cachePath string) string {
	return path.Join("task-caches", team, orNone(pipeline), orNone(job), step, strings.Trim(path.Clean(cachePath), "/")) + ".tar.zst"
}

// BuildPrefix is the audit prefix of a build.
func BuildPrefix(buildID string) string { return fmt.Sprintf("builds/%s/", buildID) }

// StepPrefix is the audit prefix of one step of a build.
func StepPrefix(buildID, stepID string) string {
	return fmt.Sprintf("builds/%s/steps/%s/", buildID, stepID)
}

// Audit object names under StepPrefix.
const (
	ActionObject = "action.json"
	PodObject    = "pod.yaml"
	EventsObject = "events.jsonl.zst"
	ResultObject = "result.json"
)

func orNone(s string) string {
	if s == "" {
		return "_"
	}
	return s
}
