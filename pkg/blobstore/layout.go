package blobstore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/porter-ci/porter/pkg/names"
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
// stored (compressed) stream has the given "<algorithm>:<hex>" digest.
// Manifests are per team: a step can only ever claim a digest within its
// own team. SHA-256 manifests are named by the bare hex, as before other
// algorithms; the others by "<algorithm>-<hex>", which no bare hex equals.
func ManifestKey(team, digest string) string {
	name := strings.Replace(digest, ":", "-", 1)
	if sum, ok := strings.CutPrefix(digest, DigestSHA256+":"); ok {
		name = sum
	}
	return "artifacts/" + team + "/" + name + ".json"
}

// TaskCacheKey is the key of a task cache for one job/step/path.
func TaskCacheKey(team, pipeline, job, step, cachePath string) string {
	return path.Join("task-caches", team, orNone(pipeline), orNone(job), step, strings.Trim(path.Clean(cachePath), "/")) + ".tar.zst"
}

// AuditID is the segment of a build's audit keys: its ID, and the time it
// was created (UTC, to the microsecond, as PostgreSQL keeps it). A zero
// time gives the ID alone, the keys of builds audited before.
func AuditID(buildID int64, created time.Time) string {
	if created.IsZero() {
		return strconv.FormatInt(buildID, 10)
	}
	return strconv.FormatInt(buildID, 10) + "-" + created.UTC().Format("20060102T150405.000000Z")
}

// AuditTrailPrefix holds every build's audit records, in the audit bucket.
const AuditTrailPrefix = "builds/"

// BuildPrefix is the audit prefix of a build (its AuditID).
func BuildPrefix(auditID string) string { return AuditTrailPrefix + auditID + "/" }

// StepPrefix is the audit prefix of one step of a build.
func StepPrefix(auditID, stepID string) string {
	return BuildPrefix(auditID) + "steps/" + stepID + "/"
}

// Audit object names under StepPrefix.
const (
	ActionObject = "action.json"
	PodObject    = "pod.yaml"
	EventsObject = "events.jsonl.zst"
	ResultObject = "result.json"
	// TimelineObject is the step pod's start as the ATC saw it
	// (api.PodTimeline), written by the ATC once the step has ended.
	TimelineObject = "timeline.json"
)

func orNone(s string) string {
	if s == "" {
		return "_"
	}
	return s
}

// TaskCachePrefix is where the task caches of a pipeline (and, with job
// and step, of one task step) live: task-caches/<team>/<pipeline>/[<job>/<step>/].
// Each name must be one key segment (names.Check).
func TaskCachePrefix(segments ...string) (string, error) {
	for _, n := range segments {
		if err := names.Check("task cache", n); err != nil {
			return "", err
		}
	}
	return "task-caches/" + strings.Join(segments, "/") + "/", nil
}

// CheckedTaskCacheKey is TaskCacheKey for names a user gave: names that
// are not one key segment, and cache paths that leave the step's
// directory, are refused rather than turned into keys (a step named
// "../../other" must not reach another team's caches). pipeline and job
// are empty for a one-off build's step.
func CheckedTaskCacheKey(team, pipeline, job, step, cachePath string) (string, error) {
	segments := []string{team, pipeline, job, step}
	if pipeline == "" && job == "" {
		segments = []string{team, step}
	}
	if _, err := TaskCachePrefix(segments...); err != nil {
		return "", err
	}
	// As TaskCacheKey cleans it.
	c := strings.Trim(path.Clean(cachePath), "/")
	if c == "" || c == "." || c == ".." || strings.HasPrefix(c, "../") || strings.ContainsRune(cachePath, 0) {
		return "", fmt.Errorf("cache path %q is not a directory inside the task's working directory", cachePath)
	}
	return TaskCacheKey(team, pipeline, job, step, cachePath), nil
}

// TaskCachePipeline is the pipeline segment of a task cache's key: the
// pipeline's name, and for an instance of an instanced pipeline also a
// digest of its instance vars, so that instances neither share nor clear
// each other's caches (Concourse keys them by job, which is per instance).
// A pipeline named like an instance's segment would share that instance's
// caches; both are the same team's.
func TaskCachePipeline(name string, instanceVars map[string]any) string {
	if len(instanceVars) == 0 {
		return name
	}
	// Maps marshal with sorted keys: the same vars give the same segment.
	b, err := json.Marshal(instanceVars)
	if err != nil {
		// Vars read back from the database always marshal; keep the name
		// apart from the plain pipeline's anyway.
		b = []byte(fmt.Sprint(instanceVars))
	}
	sum := sha256.Sum256(b)
	return name + "@" + hex.EncodeToString(sum[:8])
}
