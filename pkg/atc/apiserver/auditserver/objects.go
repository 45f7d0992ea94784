package auditserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/names"
)

// stepObjectType is the content type of an audit object of a step that
// StepObject serves; ok is false for others. The event journal is left
// out: the build's events route serves the same events.
func stepObjectType(name string) (string, bool) {
	switch name {
	case blobstore.PodObject:
		return "application/yaml; charset=utf-8", true
	case blobstore.ActionObject, blobstore.ResultObject, blobstore.TimelineObject:
		return "application/json", true
	}
	return "", false
}

// maxStepObject bounds what is read of one audit object (a pod spec, a
// result) into an answer.
const maxStepObject = 4 << 20

// StepObject answers one audit object of one of the build's steps as it
// was first written: its declared pod spec (pod.yaml), its action, its
// result or its pod's timeline.
func (s *Server) StepObject(w http.ResponseWriter, r *http.Request, b db.Build) {
	stepID, object := r.PathValue("step_id"), r.PathValue("object")
	if err := names.Check("step id", stepID); err != nil {
		apierr.Fail(w, r, s.Log, apierr.BadRequest(err))
		return
	}
	contentType, ok := stepObjectType(object)
	if !ok {
		apierr.Fail(w, r, s.Log, apierr.BadRequest(fmt.Errorf("audit object %q: a step's audit objects served here are %s, %s, %s and %s",
			object, blobstore.PodObject, blobstore.ActionObject, blobstore.ResultObject, blobstore.TimelineObject)))
		return
	}
	rc, info, key, err := s.openStepObject(r.Context(), b, stepID, object)
	if errors.Is(err, blobstore.ErrNotFound) {
		apierr.Fail(w, r, s.Log, apierr.NotFound("Audit Object Not Found", fmt.Sprintf("build %d has no %s for step %s", b.ID, object, stepID)))
		return
	}
	if err != nil {
		apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusBadGateway, err))
		return
	}
	defer rc.Close()
	body, err := io.ReadAll(io.LimitReader(rc, maxStepObject+1))
	switch {
	case err != nil:
		apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusBadGateway, fmt.Errorf("read %s: %w", key, err)))
		return
	case len(body) > maxStepObject:
		apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusBadGateway, fmt.Errorf("%s is over %d bytes (%d)", key, maxStepObject, info.Size)))
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// Output streams an output artifact of one of the build's steps, as its
// result.json in the audit trail names it, as a plain tar. Only blobs of
// the build's own team are served: a record naming another key is refused.
func (s *Server) Output(w http.ResponseWriter, r *http.Request, b db.Build) {
	stepID, name := r.PathValue("step_id"), r.PathValue("output")
	for _, n := range [][2]string{{"step id", stepID}, {"output", name}} {
		if err := names.Check(n[0], n[1]); err != nil {
			apierr.Fail(w, r, s.Log, apierr.BadRequest(err))
			return
		}
	}
	ctx := r.Context()
	rc, _, key, err := s.openStepObject(ctx, b, stepID, blobstore.ResultObject)
	if errors.Is(err, blobstore.ErrNotFound) {
		apierr.Fail(w, r, s.Log, apierr.NotFound("Output Not Found", fmt.Sprintf("build %d has no audit record of step %s (it has not ended, or ran no pod)", b.ID, stepID)))
		return
	}
	if err != nil {
		apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusBadGateway, err))
		return
	}
	var rec api.StepRecord
	err = json.NewDecoder(io.LimitReader(rc, maxStepObject)).Decode(&rec)
	rc.Close()
	if err != nil {
		apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusBadGateway, fmt.Errorf("read %s: %w", key, err)))
		return
	}
	var out *api.StepArtifact
	for i := range rec.Outputs {
		if rec.Outputs[i].Name == name {
			out = &rec.Outputs[i]
		}
	}
	if out == nil {
		apierr.Fail(w, r, s.Log, apierr.NotFound("Output Not Found", fmt.Sprintf("step %s of build %d made no output %q", stepID, b.ID, name)))
		return
	}
	if !strings.HasPrefix(out.Key, blobstore.TeamBlobPrefix(b.TeamName)) {
		apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusBadGateway, fmt.Errorf("%s names output %q at %s, outside team %s's blobs", key, name, out.Key, b.TeamName)))
		return
	}
	blob, _, err := s.Blobs.Get(ctx, out.Key)
	if errors.Is(err, blobstore.ErrNotFound) {
		// The ATC deduplicates an output after the step recorded it: the
		// same bytes are kept under the team's content address instead.
		blob, err = s.byDigest(r, b.TeamName, *out)
	}
	if errors.Is(err, blobstore.ErrNotFound) {
		apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusGone, fmt.Errorf("output %q of step %s is no longer kept (artifacts are deleted after the artifact retention)", name, stepID)))
		return
	}
	if err != nil {
		apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusBadGateway, fmt.Errorf("read output %q: %w", name, err)))
		return
	}
	defer blob.Close()
	tarStream, err := blobstore.ArtifactTar(blob)
	if err != nil {
		apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusBadGateway, fmt.Errorf("read output %q: %w", name, err)))
		return
	}
	defer tarStream.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", fmt.Sprintf("build-%d-%s.tar", b.ID, safeFilename(name))))
	// The digest is the stored stream's (compressed, as the audit record
	// lists it), not this tar's.
	w.Header().Set("X-Porter-Artifact-Digest", out.Digest)
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, tarStream); err != nil {
		s.Log.Warn("send an output", "build", b.ID, "step", stepID, "output", name, "err", err)
	}
}

// openStepObject opens the audit object name of build b's step as it was
// first written, and says its key. It is read at the build's audit prefix
// directly; the build's objects are listed (auditObjects) only when it is
// not there, for a record under the prefix of an older layout.
func (s *Server) openStepObject(ctx context.Context, b db.Build, stepID, name string) (io.ReadCloser, blobstore.ObjectInfo, string, error) {
	rest := "steps/" + stepID + "/" + name
	key := blobstore.BuildPrefix(blobstore.AuditID(b.ID, b.CreateTime)) + rest
	rc, info, err := blobstore.GetOriginal(ctx, s.Bucket, key)
	if !errors.Is(err, blobstore.ErrNotFound) {
		if err != nil {
			err = fmt.Errorf("read %s: %w", key, err)
		}
		return rc, info, key, err
	}
	prefix, _, err := s.auditObjects(ctx, b)
	if err != nil {
		return nil, info, key, err
	}
	if prefix+rest == key {
		return nil, info, key, fmt.Errorf("read %s: %w", key, blobstore.ErrNotFound)
	}
	key = prefix + rest
	rc, info, err = blobstore.GetOriginal(ctx, s.Bucket, key)
	if err != nil {
		err = fmt.Errorf("read %s: %w", key, err)
	}
	return rc, info, key, err
}

// byDigest opens the team's blob of the artifact's content address: one
// with the same digest and size holds the same bytes.
func (s *Server) byDigest(r *http.Request, team string, a api.StepArtifact) (io.ReadCloser, error) {
	m, err := blobstore.ReadManifest(r.Context(), s.Blobs, blobstore.ManifestKey(team, a.Digest))
	if err != nil {
		return nil, err
	}
	if m.Digest != a.Digest || m.Size != a.Size || !strings.HasPrefix(m.Key, blobstore.TeamBlobPrefix(team)) {
		return nil, fmt.Errorf("output %q: %w", a.Name, blobstore.ErrNotFound)
	}
	rc, _, err := s.Blobs.Get(r.Context(), m.Key)
	return rc, err
}

// safeFilename keeps a name's letters, digits, '-', '_' and '.', so the
// header needs no escaping a browser could read differently.
func safeFilename(name string) string {
	return strings.Map(func(c rune) rune {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
			return c
		}
		return '_'
	}, name)
}
