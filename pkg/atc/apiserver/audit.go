package apiserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/db"
)

// handleAudit reads a build's audit trail back from the blobstore: what the
// sidecars and the ATC wrote under builds/<id>/, so a person can check what
// ran, where, with which inputs and what came out.
func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request, b db.Build) {
	ctx := r.Context()
	prefix := blobstore.BuildPrefix(fmt.Sprint(b.ID))
	objs, err := s.audit.List(ctx, prefix)
	if err != nil {
		s.fail(w, r, withStatus(http.StatusBadGateway, fmt.Errorf("list %s: %w", prefix, err)))
		return
	}
	audit := api.Audit{Objects: []api.AuditObject{}, Steps: map[string]json.RawMessage{}}
	read := func(key string) (json.RawMessage, error) {
		// A version written after the first one is not the record.
		rc, _, err := blobstore.GetOriginal(ctx, s.audit, key)
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
		}
		if err != nil && !errors.Is(err, blobstore.ErrNotFound) {
			s.fail(w, r, withStatus(http.StatusBadGateway, err))
			return
		}
	}
	writeJSON(w, http.StatusOK, audit)
}
