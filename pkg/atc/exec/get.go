package exec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// GetStep fetches a version into the build's artifact named after the
// step, from the resource cache when it holds it.
type GetStep struct{ Plan *concourse.Plan }

func (s GetStep) Run(ctx context.Context, x *RunState) (bool, error) {
	p := x.r.cfg.BaseResourceTypeDefaults.Apply(s.Plan)
	gp := p.Get
	d := x.delegate(p.ID)
	r := x.b.Record(p.ID, gp.Name, concourse.KindGet)
	g := &getRequest{x: x, gp: gp, r: r}
	fin, done, err := x.runResource(ctx, p, r, getStep(gp), d.InitializeGet, func() (map[string]any, error) { return g.request(ctx) },
		withCache(func(image string) (bool, error) { return g.cached(ctx, image) }))
	version, cached := g.version, g.hit
	if done {
		var rec buildstate.StepRecord
		x.b.Update(func() { rec = *r })
		if rec.Status == concourse.StatusSucceeded {
			x.noteFetched(gp, rec.Version)
		}
		return x.replayed(r, err)
	}
	if cached != nil {
		var md []concourse.MetadataField
		_ = json.Unmarshal(cached.Metadata, &md)
		resp, _ := json.Marshal(resourceResponse{Version: cached.Version, Metadata: md})
		fin = &eventspb.StepFinished{Result: eventspb.Result_RESULT_SUCCEEDED, Response: resp,
			Outputs: []*eventspb.ArtifactUploaded{{Name: gp.Name, Key: cached.Artifact, Digest: cached.Digest, Size: cached.Size}}}
		x.r.log.Info("get from the resource cache", "build", x.b.ID, "step", gp.Name, "version", cached.Version)
	}
	if fin == nil {
		return x.replayed(r, err)
	}
	if fin.GetResult() != eventspb.Result_RESULT_SUCCEEDED {
		if fin.GetResult() == eventspb.Result_RESULT_FAILED {
			d.FinishGet(int(fin.GetExitStatus()), nil, nil)
		}
		return x.endResource(ctx, p, r, fin)
	}
	var resp resourceResponse
	if err := json.Unmarshal(fin.GetResponse(), &resp); err != nil {
		return x.failResource(ctx, p, r, fmt.Errorf("in printed JSON that is not {\"version\": ..., \"metadata\": ...}: %w", err))
	}
	if resp.Version == nil {
		resp.Version = version
	}
	d.FinishGet(0, resp.Version, stepplan.EventMetadata(resp.Metadata))
	art, ok := stepplan.OutputOf(fin, gp.Name)
	if !ok {
		return x.failResource(ctx, p, r, fmt.Errorf("get %q stored no artifact", gp.Name))
	}
	x.b.Update(func() {
		r.Version, r.Metadata = resp.Version, resp.Metadata
		r.Outputs = map[string]api.ArtifactRef{gp.Name: art}
	})
	x.setArtifact(gp.Name, art)
	x.noteFetched(gp, resp.Version)
	if cached == nil {
		x.saveResourceCache(ctx, r, gp, art, resp)
	}
	if err := x.r.recordBuildVersion(ctx, x.b, gp.Name, gp.Resource, buildstate.Version(resp), true); err != nil {
		return x.failResource(ctx, p, r, fmt.Errorf("record the version of %s: %w", gp.Name, err))
	}
	return x.endResource(ctx, p, r, fin)
}

func getStep(gp *concourse.GetPlan) resourceStep {
	return resourceStep{kind: concourse.KindGet, name: gp.Name, typ: gp.Type, source: gp.Source, params: gp.Params, image: gp.TypeImage, tags: gp.Tags, timeout: gp.Timeout, restartable: true}
}

// getRequest is what a get asks its resource for: the version, and the
// source and params with their ((vars)) filled in (request); and whether
// the resource cache holds it (cached, which notes the cache key in r, if
// any, for the fetch to fill it).
type getRequest struct {
	x              *RunState
	gp             *concourse.GetPlan
	r              *buildstate.StepRecord
	version        map[string]string
	source, params map[string]any
	hit            *db.ResourceCache
}

func (g *getRequest) request(ctx context.Context) (map[string]any, error) {
	v, err := g.x.getVersion(g.gp)
	if err != nil {
		return nil, err
	}
	g.version = v
	sv := g.x.stepVars(nil)
	if g.source, err = sv.InterpolateMap(ctx, g.gp.Source); err != nil {
		return nil, err
	}
	if g.params, err = sv.InterpolateMap(ctx, g.gp.Params); err != nil {
		return nil, err
	}
	return map[string]any{"source": stepplan.NonNilMap(g.source), "version": v, "params": stepplan.NonNilMap(g.params)}, nil
}

func (g *getRequest) cached(ctx context.Context, image string) (bool, error) {
	x := g.x
	key, err := db.ResourceCacheKey(x.b.TeamID, g.gp.Type, image, stepplan.NonNilMap(g.source), stepplan.NonNilMap(g.params), g.version)
	if err != nil {
		return false, err
	}
	if g.r != nil {
		x.b.Update(func() { g.r.CacheKey = key })
	}
	c, err := x.r.db.ResourceCache(ctx, key)
	switch {
	case errors.Is(err, db.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look up the resource cache: %w", err)
	}
	// The artifacts' lifecycle is the store's: a cache whose artifact
	// is gone is fetched again (and stored anew).
	if _, err := x.r.store.Stat(ctx, c.Artifact); err != nil {
		x.r.log.Info("resource cache without its artifact; fetching again", "key", key, "artifact", c.Artifact, "err", err)
		return false, nil
	}
	g.hit = &c
	return true, nil
}

// getVersion is the version a get fetches: its own, or the one an earlier
// put or check of the build recorded.
func (x *RunState) getVersion(gp *concourse.GetPlan) (map[string]string, error) {
	if gp.VersionFrom == nil {
		if gp.Version == nil {
			return nil, fmt.Errorf("get %q has no version to fetch (neither version nor version_from)", gp.Name)
		}
		return gp.Version, nil
	}
	var v map[string]string
	x.b.Update(func() {
		if rec, ok := x.b.State.Steps[*gp.VersionFrom]; ok {
			v = rec.Version
		}
	})
	if v == nil {
		return nil, fmt.Errorf("get %q: step %s, whose version it fetches, recorded none", gp.Name, *gp.VersionFrom)
	}
	return v, nil
}

func (x *RunState) saveResourceCache(ctx context.Context, r *buildstate.StepRecord, gp *concourse.GetPlan, art api.ArtifactRef, resp resourceResponse) {
	var key string
	x.b.Update(func() { key = r.CacheKey })
	if key == "" {
		return
	}
	md, _ := json.Marshal(resp.Metadata)
	err := x.r.retryDB(ctx, "save the resource cache", func(ctx context.Context) error {
		var resourceID int64
		if gp.Resource != "" {
			id, err := x.r.db.BuildResourceID(ctx, x.b.ID, gp.Resource)
			if err != nil {
				return err
			}
			resourceID = id
		}
		return x.r.db.SaveResourceCache(ctx, db.ResourceCache{Key: key, TeamID: x.b.TeamID, ResourceID: resourceID,
			Artifact: art.Key, Digest: art.Digest, Size: art.Size, Version: resp.Version, Metadata: md})
	})
	if err != nil {
		// The get succeeded; only the next one will fetch again.
		x.r.log.Warn("save resource cache", "build", x.b.ID, "step", gp.Name, "err", err)
	}
}
