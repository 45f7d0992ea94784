// Package auditserver answers Porter's audit trail route: a build's
// audit records read back from the audit bucket.
package auditserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// Server reads the audit bucket; the API checks who may read the build.
type Server struct {
	// Bucket is the audit bucket.
	Bucket blobstore.Store
	// Blobs is the artifacts' store (Output).
	Blobs blobstore.Store
	Log   *slog.Logger
}

// Audit reads a build's audit trail back from the blobstore: what the
// sidecars and the ATC wrote under builds/<audit id>/, so a person can check
// what ran, where, with which inputs and what came out.
func (s *Server) Audit(w http.ResponseWriter, r *http.Request, b db.Build) {
	ctx := r.Context()
	prefix, objs, err := s.auditObjects(ctx, b)
	if err != nil {
		apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusBadGateway, err))
		return
	}
	audit := api.Audit{Objects: []api.AuditObject{}, Steps: map[string]json.RawMessage{}, Timelines: map[string]json.RawMessage{}}
	read := func(key string) (json.RawMessage, error) {
		// A version written after the first one is not the record.
		rc, _, err := blobstore.GetOriginal(ctx, s.Bucket, key)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		body, err := io.ReadAll(io.LimitReader(rc, 1<<20))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", key, err)
		}
		if !json.Valid(body) {
			return nil, fmt.Errorf("%s is not JSON", key)
		}
		return body, nil
	}
	for _, o := range objs {
		audit.Objects = append(audit.Objects, api.AuditObject{Key: o.Key, Size: o.Size, LastModified: o.LastModified})
		rest := strings.TrimPrefix(o.Key, prefix)
		var body json.RawMessage
		switch {
		case rest == "build.json":
			body, err = read(o.Key)
			audit.Build = body
		case strings.HasPrefix(rest, "steps/") && strings.HasSuffix(rest, "/"+blobstore.ResultObject):
			body, err = read(o.Key)
			audit.Steps[strings.TrimSuffix(strings.TrimPrefix(rest, "steps/"), "/"+blobstore.ResultObject)] = body
		case strings.HasPrefix(rest, "steps/") && strings.HasSuffix(rest, "/"+blobstore.TimelineObject):
			body, err = read(o.Key)
			audit.Timelines[strings.TrimSuffix(strings.TrimPrefix(rest, "steps/"), "/"+blobstore.TimelineObject)] = body
		}
		if err != nil && !errors.Is(err, blobstore.ErrNotFound) {
			apierr.Fail(w, r, s.Log, apierr.WithStatus(http.StatusBadGateway, err))
			return
		}
	}
	httpreply.JSON(w, http.StatusOK, audit)
}

// auditObjects lists the build's audit records and says under which prefix.
// Builds audited before the audit key had the creation time in it have
// theirs under builds/<id>/; that prefix is taken only when its build.json
// is this build's (the same end time), not an earlier build's of the same
// ID (a database reset or restore gives IDs out again).
func (s *Server) auditObjects(ctx context.Context, b db.Build) (string, []blobstore.ObjectInfo, error) {
	prefix := blobstore.BuildPrefix(blobstore.AuditID(b.ID, b.CreateTime))
	objs, err := s.Bucket.List(ctx, prefix)
	if err != nil || len(objs) > 0 || b.EndTime.IsZero() {
		if err != nil {
			err = fmt.Errorf("list %s: %w", prefix, err)
		}
		return prefix, objs, err
	}
	legacy := blobstore.BuildPrefix(fmt.Sprint(b.ID))
	rc, _, err := blobstore.GetOriginal(ctx, s.Bucket, legacy+"build.json")
	if errors.Is(err, blobstore.ErrNotFound) {
		return prefix, objs, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("read %sbuild.json: %w", legacy, err)
	}
	defer rc.Close()
	var rec struct {
		EndTime int64 `json:"end_time"`
	}
	if err := json.NewDecoder(io.LimitReader(rc, 1<<20)).Decode(&rec); err != nil {
		return "", nil, fmt.Errorf("read %sbuild.json: %w", legacy, err)
	}
	if d := rec.EndTime - b.EndTime.Unix(); d < -2 || d > 2 {
		return prefix, objs, nil // an earlier build's
	}
	objs, err = s.Bucket.List(ctx, legacy)
	if err != nil {
		return "", nil, fmt.Errorf("list %s: %w", legacy, err)
	}
	return legacy, objs, nil
}
