// Package volumeserver answers `fly volumes`, as Concourse's
// api/volumeserver. Porter's volumes are blobstore objects, not a worker's
// directories: the outputs kept for download (artifact), the fetched
// resource versions kept for later gets (resource) and the task caches
// (task-cache). Each is shown on the worker artifacts are recorded on.
package volumeserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/httpreply"
)

// Store holds what the volumes are listed from.
type Store interface {
	Artifacts(ctx context.Context, teamID int) ([]db.Artifact, error)
	TeamResourceCaches(ctx context.Context, teamID int) ([]db.TeamResourceCache, error)
	Pipelines(ctx context.Context, f db.PipelineFilter) ([]db.Pipeline, error)
}

// Server holds the handler's parts; the API checks who may call it.
type Server struct {
	Store Store
	// Blobs holds the task caches, which have no record but their object.
	Blobs blobstore.Store
	// Worker is the worker the caches are shown on, as artifacts are.
	Worker string
	Log    *slog.Logger
}

// Volume types, as Concourse names them.
const (
	typeArtifact  = "artifact"
	typeResource  = "resource"
	typeTaskCache = "task-cache"
)

// List lists the team's volumes; another team's are not among them.
func (s *Server) List(w http.ResponseWriter, r *http.Request, team db.Team) {
	out, err := s.list(r.Context(), team)
	if err != nil {
		apierr.Fail(w, r, s.Log, err)
		return
	}
	httpreply.JSON(w, http.StatusOK, out)
}

func (s *Server) list(ctx context.Context, team db.Team) ([]concourse.Volume, error) {
	arts, err := s.Store.Artifacts(ctx, team.ID)
	if err != nil {
		return nil, err
	}
	out := []concourse.Volume{}
	for _, a := range arts {
		out = append(out, concourse.Volume{ID: strconv.FormatInt(a.ID, 10), WorkerName: a.WorkerName, Type: typeArtifact, Path: a.Key, StepName: a.Name})
	}
	caches, err := s.Store.TeamResourceCaches(ctx, team.ID)
	if err != nil {
		return nil, err
	}
	for _, c := range caches {
		out = append(out, s.resourceVolume(c))
	}
	tcs, err := s.taskCaches(ctx, team)
	if err != nil {
		return nil, err
	}
	return append(out, tcs...), nil
}

// resourceVolume is a fetched version. fly shows a resource volume's
// version (and with -d its type), and fails on one without resource_type.
// Its step name is the resource's (none for a one-off build's get or an
// image's fetch, whose type is not recorded either).
func (s *Server) resourceVolume(c db.TeamResourceCache) concourse.Volume {
	rt := &concourse.VolumeResourceType{Version: c.Version}
	if c.ResourceType != "" {
		rt.BaseResourceType = &concourse.VolumeBaseResourceType{Name: c.ResourceType}
	}
	return concourse.Volume{ID: c.Key, WorkerName: s.Worker, Type: typeResource, Path: c.Artifact, ResourceType: rt,
		PipelineID: int(c.PipelineID), PipelineName: c.PipelineName, PipelineInstanceVars: c.InstanceVars, StepName: c.ResourceName}
}

// taskCaches are the team's task caches, read from their keys
// (blobstore.TaskCacheKey: <pipeline>/<job>/<step>/<path>.tar.zst under
// the team's prefix). fly shows a task cache as pipeline/job/step.
func (s *Server) taskCaches(ctx context.Context, team db.Team) ([]concourse.Volume, error) {
	prefix, err := blobstore.TaskCachePrefix(team.Name)
	if err != nil {
		return nil, fmt.Errorf("task caches of team %s: %w", team.Name, err)
	}
	objs, err := s.Blobs.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list the task caches of team %s: %w", team.Name, err)
	}
	if len(objs) == 0 {
		return nil, nil
	}
	// A key names an instance's pipeline by name and a digest of its vars.
	ps, err := s.Store.Pipelines(ctx, db.PipelineFilter{TeamIDs: []int{team.ID}})
	if err != nil {
		return nil, err
	}
	bySegment := map[string]db.Pipeline{}
	for _, p := range ps {
		bySegment[blobstore.TaskCachePipeline(p.Name, p.InstanceVars)] = p
	}
	var out []concourse.Volume
	for _, o := range objs {
		seg := strings.SplitN(strings.TrimPrefix(o.Key, prefix), "/", 4)
		if len(seg) != 4 || !strings.HasSuffix(seg[3], ".tar.zst") {
			continue // not a cache's key
		}
		v := concourse.Volume{ID: handle(o.Key), WorkerName: s.Worker, Type: typeTaskCache, Path: o.Key, JobName: seg[1], StepName: seg[2]}
		if p, ok := bySegment[seg[0]]; ok {
			v.PipelineID, v.PipelineName, v.PipelineInstanceVars = int(p.ID), p.Name, p.InstanceVars
		} else if seg[0] != "_" {
			v.PipelineName = seg[0]
		}
		if seg[1] == "_" {
			v.JobName = "" // a one-off build's
		}
		out = append(out, v)
	}
	return out, nil
}

// handle names a task cache by its key: stable while it exists, and as
// long as a resource cache's.
func handle(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}
