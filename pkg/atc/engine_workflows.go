package atc

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/porter-ci/porter/pkg/atc/lifecycle"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// lifecycle is what renaming or destroying a team or pipeline does beyond
// its records (pkg/atc/lifecycle).
func (e APIEngine) lifecycle() lifecycle.Workflows {
	return lifecycle.Workflows{Store: e.s.db, Blobs: e.s.store, Log: e.s.log,
		Abort: func(ctx context.Context, id int64) error { return e.AbortBuild(ctx, db.Build{ID: id}) }}
}

func (e APIEngine) DestroyTeam(ctx context.Context, team db.Team) error {
	return e.lifecycle().DestroyTeam(ctx, team)
}

func (e APIEngine) RenameTeam(ctx context.Context, team db.Team, name string) error {
	return e.lifecycle().RenameTeam(ctx, team, name)
}

func (e APIEngine) DestroyPipeline(ctx context.Context, team string, p db.Pipeline) error {
	return e.lifecycle().DestroyPipeline(ctx, team, p)
}

func (e APIEngine) RenamePipeline(ctx context.Context, team string, p db.Pipeline, name string) error {
	return e.lifecycle().RenamePipeline(ctx, team, p, name)
}

func (e APIEngine) ClearTaskCaches(ctx context.Context, prefix string) (int64, error) {
	return e.lifecycle().ClearTaskCaches(ctx, prefix)
}

// CheckResourceType starts a one-off build that runs a resource type's
// check (from the version given, if any). Porter keeps no versions of a
// type: each use resolves the type's image with this same check, so the
// build shows whether that works now.
func (e APIEngine) CheckResourceType(ctx context.Context, team db.Team, createdBy, name string, typ concourse.ResourceType, from map[string]string) (db.Build, error) {
	plan := concourse.Plan{ID: concourse.PlanID("check-type-" + name), Check: &concourse.CheckPlan{
		Name: name, Type: typ.Type, Source: typ.Source, FromVersion: from, Tags: typ.Tags,
		TypeImage: concourse.TypeImage{BaseType: typ.Type, Privileged: typ.Privileged}}}
	raw, err := json.Marshal(plan)
	if err != nil {
		return db.Build{}, fmt.Errorf("check plan of resource type %s: %w", name, err)
	}
	return e.s.createBuild(ctx, team, createdBy, plan, raw)
}
