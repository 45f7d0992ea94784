package db

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db/internal/pg"
)

// ErrConfigVersion is wrapped when a pipeline's config is
// saved from a version that is no longer the current one.
var ErrConfigVersion = errors.New("the pipeline's config changed since it was read")

// Pipeline is a team's pipeline.
type Pipeline struct {
	ID            int64
	TeamID        int
	TeamName      string
	Name          string
	Config        json.RawMessage // Concourse's pipeline config (concourse.Config) as JSON
	ConfigVersion int64
	Paused        bool
	PausedBy      string
	PausedAt      time.Time // zero when not paused
	Public        bool
	Ordering      int
	LastUpdated   time.Time
	// Archived pipelines are paused, and stay so until set again.
	Archived bool
	// ParentJobID and ParentBuildID are the job and build whose
	// set_pipeline step last set the pipeline (0: set through the API).
	ParentJobID, ParentBuildID int64
	// InstanceVars tell the instances of an instanced pipeline apart (nil
	// for an ordinary pipeline).
	InstanceVars map[string]any
}

const pipelineColumns = `p.id, p.team_id, t.name, p.name, p.config, p.config_version, p.paused, p.paused_by,
	p.paused_at, p.public, p.ordering, p.last_updated, p.archived, coalesce(p.parent_job_id, 0), coalesce(p.parent_build_id, 0), p.instance_vars`

const pipelineFrom = " FROM pipelines p JOIN teams t ON t.id = p.team_id "

func scanPipeline(row pgx.Row) (Pipeline, error) {
	var p Pipeline
	var config []byte
	var pausedAt *time.Time
	var instanceVars []byte
	err := row.Scan(&p.ID, &p.TeamID, &p.TeamName, &p.Name, &config, &p.ConfigVersion, &p.Paused, &p.PausedBy,
		&pausedAt, &p.Public, &p.Ordering, &p.LastUpdated, &p.Archived, &p.ParentJobID, &p.ParentBuildID, &instanceVars)
	if err != nil {
		return Pipeline{}, err
	}
	if err := json.Unmarshal(instanceVars, &p.InstanceVars); err != nil {
		return Pipeline{}, fmt.Errorf("instance vars of pipeline %d: %w", p.ID, err)
	}
	if len(p.InstanceVars) == 0 {
		p.InstanceVars = nil
	}
	p.Config, p.PausedAt = config, pg.NullTime(pausedAt)
	return p, nil
}

func collectPipelines(rows pgx.Rows) ([]Pipeline, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Pipeline, error) { return scanPipeline(r) })
}

// SavePipeline creates the team's pipeline (paused, last in the team's
// order) or replaces its config, in one transaction: jobs and resources are
// upserted by name (renamed first where old_name says so), the ones no
// longer in the config become inactive (their builds and versions stay),
// and a resource whose type or source changed gets a new config hash and is
// due for a check at once.
//
// from is the config version the caller read (X-Concourse-Config-Version,
// 0 for none): saving over an existing pipeline whose version is not from
// fails with ErrConfigVersion, and saves nothing; so does creating one that
// a concurrent save created first (ErrConflict).
func (d *DB) SavePipeline(ctx context.Context, teamID int, name string, cfg concourse.Config, from int64) (p Pipeline, created bool, err error) {
	return d.savePipeline(ctx, teamID, PipelineRef{Name: name}, cfg, from, PipelineParent{})
}

// PipelineRef names a pipeline: its name and, for an instance of an
// instanced pipeline, its instance vars.
type PipelineRef struct {
	Name         string
	InstanceVars map[string]any
}

// String is how fly writes the ref: name/k:v,k2:v2.
func (r PipelineRef) String() string {
	if len(r.InstanceVars) == 0 {
		return r.Name
	}
	keys := make([]string, 0, len(r.InstanceVars))
	for k := range r.InstanceVars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		v, _ := json.Marshal(r.InstanceVars[k])
		parts[i] = k + ":" + strings.Trim(string(v), `"`)
	}
	return r.Name + "/" + strings.Join(parts, ",")
}

// SavePipelineInstance is SavePipeline for a pipeline named by ref: an
// instance of an instanced pipeline when ref has instance vars.
func (d *DB) SavePipelineInstance(ctx context.Context, teamID int, ref PipelineRef, cfg concourse.Config, from int64) (Pipeline, bool, error) {
	return d.savePipeline(ctx, teamID, ref, cfg, from, PipelineParent{})
}

// PipelineParent is the job build whose set_pipeline step saves a
// pipeline.
type PipelineParent struct {
	JobID, BuildID int64
}

// ErrSetByNewerBuild is wrapped when a set_pipeline step would overwrite
// a pipeline that a newer build has set: the newer config stays.
var ErrSetByNewerBuild = errors.New("the pipeline was already set by a newer build")

// SavePipelineFromBuild is SavePipeline for a set_pipeline step: a new
// pipeline starts unpaused (as in Concourse), the
// pipeline remembers the job and build that set it, and a build older
// than the one that last set it saves nothing (ErrSetByNewerBuild).
func (d *DB) SavePipelineFromBuild(ctx context.Context, teamID int, ref PipelineRef, cfg concourse.Config, from int64, parent PipelineParent) (Pipeline, bool, error) {
	return d.savePipeline(ctx, teamID, ref, cfg, from, parent)
}

// SetPipelineParent records that a set_pipeline step found nothing to
// change in the pipeline: it is still the job's.
func (d *DB) SetPipelineParent(ctx context.Context, id int64, parent PipelineParent) error {
	return d.execOne(ctx, fmt.Sprintf("set the parent of pipeline %d", id),
		`UPDATE pipelines SET parent_job_id = $2, parent_build_id = $3 WHERE id = $1`,
		id, nullID(parent.JobID), nullID(parent.BuildID))
}

// nullID is NULL for 0.
func nullID(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
}

func (d *DB) savePipeline(ctx context.Context, teamID int, ref PipelineRef, cfg concourse.Config, from int64, parent PipelineParent) (p Pipeline, created bool, err error) {
	name := ref.String()
	plan, err := planSave(cfg)
	if err != nil {
		return Pipeline{}, false, fmt.Errorf("save pipeline %s: %w", name, err)
	}
	iv, err := pg.InstanceVarsJSON(ref.InstanceVars)
	if err != nil {
		return Pipeline{}, false, fmt.Errorf("save pipeline %s: %w", name, err)
	}
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var id, version, lastParentBuild int64
		err := tx.QueryRow(ctx, `SELECT id, config_version, coalesce(parent_build_id, 0) FROM pipelines
			WHERE team_id = $1 AND name = $2 AND instance_vars = $3::jsonb FOR UPDATE`,
			teamID, ref.Name, iv).Scan(&id, &version, &lastParentBuild)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			created = true
			// A new instance joins its name's place in the team's order,
			// last among the instances.
			err = tx.QueryRow(ctx, `
				INSERT INTO pipelines (team_id, name, config, paused, ordering, secondary_ordering,
					parent_job_id, parent_build_id, instance_vars)
				VALUES ($1, $2, $3::jsonb, $6,
					COALESCE((SELECT MIN(ordering) FROM pipelines WHERE team_id = $1 AND name = $2),
						(SELECT COALESCE(MAX(ordering), 0) + 1 FROM pipelines WHERE team_id = $1)),
					(SELECT COALESCE(MAX(secondary_ordering), 0) + 1 FROM pipelines WHERE team_id = $1 AND name = $2),
					$4, $5, $7::jsonb)
				RETURNING id`, teamID, ref.Name, string(plan.config), nullID(parent.JobID), nullID(parent.BuildID),
				parent.BuildID == 0, iv).Scan(&id)
			if err != nil {
				// A concurrent save created it first: the caller's view is stale.
				return pg.Classify(err, "create")
			}
		case err != nil:
			return err
		case parent.BuildID != 0 && lastParentBuild > parent.BuildID:
			return fmt.Errorf("build %d set it after build %d: %w", lastParentBuild, parent.BuildID, ErrSetByNewerBuild)
		case version != from:
			return fmt.Errorf("saving from version %d, but it is at %d: %w", from, version, ErrConfigVersion)
		default:
			_, err = tx.Exec(ctx, `
				UPDATE pipelines SET config = $2::jsonb, config_version = config_version + 1, last_updated = now(),
					archived = false, -- setting an archived pipeline unarchives it (still paused), as in Concourse
					parent_job_id = $3, parent_build_id = $4
				WHERE id = $1`, id, string(plan.config), nullID(parent.JobID), nullID(parent.BuildID))
			if err != nil {
				return err
			}
		}
		if err := saveJobs(ctx, tx, id, plan.jobs); err != nil {
			return err
		}
		if err := saveResources(ctx, tx, id, plan.resources); err != nil {
			return err
		}
		p, err = scanPipeline(tx.QueryRow(ctx, "SELECT "+pipelineColumns+pipelineFrom+"WHERE p.id = $1", id))
		return err
	})
	if err != nil {
		return Pipeline{}, false, pg.Classify(err, "save pipeline %s of team %d", name, teamID)
	}
	return p, created, nil
}

// savePlan is a config turned into rows.
type savePlan struct {
	config    []byte
	jobs      []jobRow
	resources []resourceRow
}

type jobRow struct {
	name, oldName string
	config        []byte
}

type resourceRow struct {
	name, oldName, typ, hash string
	config                   []byte
}

func planSave(cfg concourse.Config) (savePlan, error) {
	var p savePlan
	var err error
	if p.config, err = json.Marshal(cfg); err != nil {
		return savePlan{}, fmt.Errorf("encode config: %w", err)
	}
	for _, j := range cfg.Jobs {
		b, err := json.Marshal(j)
		if err != nil {
			return savePlan{}, fmt.Errorf("encode job %s: %w", j.Name, err)
		}
		p.jobs = append(p.jobs, jobRow{name: j.Name, oldName: j.OldName, config: b})
	}
	for _, r := range cfg.Resources {
		b, err := json.Marshal(r)
		if err != nil {
			return savePlan{}, fmt.Errorf("encode resource %s: %w", r.Name, err)
		}
		hash, err := ResourceConfigHash(r, cfg.ResourceTypes)
		if err != nil {
			return savePlan{}, err
		}
		p.resources = append(p.resources, resourceRow{name: r.Name, oldName: r.OldName, typ: r.Type, hash: hash, config: b})
	}
	return p, nil
}

func saveJobs(ctx context.Context, tx pgx.Tx, pipelineID int64, jobs []jobRow) error {
	names := make([]string, 0, len(jobs))
	for _, j := range jobs {
		names = append(names, j.name)
		if j.oldName != "" && j.oldName != j.name {
			// The old job's builds become the new one's, as in Concourse.
			_, err := tx.Exec(ctx, `
				UPDATE jobs SET name = $3 WHERE pipeline_id = $1 AND name = $2
				AND NOT EXISTS (SELECT 1 FROM jobs WHERE pipeline_id = $1 AND name = $3)`, pipelineID, j.oldName, j.name)
			if err != nil {
				return fmt.Errorf("rename job %s to %s: %w", j.oldName, j.name, err)
			}
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO jobs (pipeline_id, name, config) VALUES ($1, $2, $3::jsonb)
			ON CONFLICT (pipeline_id, name) DO UPDATE
			SET config = excluded.config, active = true, schedule_requested = now()`,
			pipelineID, j.name, string(j.config))
		if err != nil {
			return fmt.Errorf("save job %s: %w", j.name, err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE jobs SET active = false WHERE pipeline_id = $1 AND NOT (name = ANY($2))`,
		pipelineID, names); err != nil {
		return fmt.Errorf("deactivate removed jobs: %w", err)
	}
	return nil
}

func saveResources(ctx context.Context, tx pgx.Tx, pipelineID int64, resources []resourceRow) error {
	names := make([]string, 0, len(resources))
	for _, r := range resources {
		names = append(names, r.name)
		if r.oldName != "" && r.oldName != r.name {
			_, err := tx.Exec(ctx, `
				UPDATE resources SET name = $3 WHERE pipeline_id = $1 AND name = $2
				AND NOT EXISTS (SELECT 1 FROM resources WHERE pipeline_id = $1 AND name = $3)`, pipelineID, r.oldName, r.name)
			if err != nil {
				return fmt.Errorf("rename resource %s to %s: %w", r.oldName, r.name, err)
			}
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO resources (pipeline_id, name, type, config, config_hash) VALUES ($1, $2, $3, $4::jsonb, $5)
			ON CONFLICT (pipeline_id, name) DO UPDATE
			SET type = excluded.type, config = excluded.config, config_hash = excluded.config_hash, active = true,
				next_check = CASE WHEN resources.config_hash <> excluded.config_hash OR NOT resources.active
					THEN now() ELSE resources.next_check END,
				check_error = CASE WHEN resources.config_hash <> excluded.config_hash
					THEN '' ELSE resources.check_error END`,
			pipelineID, r.name, r.typ, string(r.config), r.hash)
		if err != nil {
			return fmt.Errorf("save resource %s: %w", r.name, err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE resources SET active = false WHERE pipeline_id = $1 AND NOT (name = ANY($2))`,
		pipelineID, names); err != nil {
		return fmt.Errorf("deactivate removed resources: %w", err)
	}
	return nil
}

// ResourceConfigHash is what a resource's versions belong to: the sha256 of
// its type and source and, when the type is one of the pipeline's
// resource_types, of that type's type, source, params and defaults (and its
// type's, and so on), as canonical JSON (map keys sorted). ((vars)) are
// hashed as written. Settings that do not change what check finds
// (check_every, tags, icon...) are left out.
func ResourceConfigHash(r concourse.ResourceConfig, types []concourse.ResourceType) (string, error) {
	type typeConfig struct {
		Type     string         `json:"type"`
		Source   map[string]any `json:"source"`
		Params   map[string]any `json:"params,omitempty"`
		Defaults map[string]any `json:"defaults,omitempty"`
	}
	byName := map[string]concourse.ResourceType{}
	for _, t := range types {
		byName[t.Name] = t
	}
	// The chain of custom types under the resource, nearest first; a type
	// named like the base type it uses ("registry-image" over registry-image)
	// ends the chain, as a cycle would.
	var chain []typeConfig
	seen := map[string]bool{}
	for name := r.Type; ; {
		t, ok := byName[name]
		if !ok || seen[name] {
			break
		}
		seen[name] = true
		chain = append(chain, typeConfig{Type: t.Type, Source: t.Source, Params: t.Params, Defaults: t.Defaults})
		name = t.Type
	}
	b, err := json.Marshal(struct {
		typeConfig
		Types []typeConfig `json:"resource_types,omitempty"`
	}{typeConfig{Type: r.Type, Source: r.Source}, chain})
	if err != nil {
		return "", fmt.Errorf("hash config of resource %s: %w", r.Name, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Pipeline looks a team's pipeline up by name (not an instance of an
// instanced pipeline).
func (d *DB) Pipeline(ctx context.Context, teamID int, name string) (Pipeline, error) {
	return d.PipelineInstance(ctx, teamID, PipelineRef{Name: name})
}

// PipelineInstance looks a team's pipeline up by name and instance vars.
func (d *DB) PipelineInstance(ctx context.Context, teamID int, ref PipelineRef) (Pipeline, error) {
	iv, err := pg.InstanceVarsJSON(ref.InstanceVars)
	if err != nil {
		return Pipeline{}, err
	}
	p, err := scanPipeline(d.pool.QueryRow(ctx, "SELECT "+pipelineColumns+pipelineFrom+
		"WHERE p.team_id = $1 AND p.name = $2 AND p.instance_vars = $3::jsonb", teamID, ref.Name, iv))
	if err != nil {
		return Pipeline{}, pg.Classify(err, "pipeline %s", ref)
	}
	return p, nil
}

// OrderPipelineInstances orders the instances of the team's instanced
// pipeline name as listed; the ones not listed follow, in their order.
func (d *DB) OrderPipelineInstances(ctx context.Context, teamID int, name string, instances []map[string]any) error {
	ivs := make([]string, len(instances))
	for i, v := range instances {
		var err error
		if ivs[i], err = pg.InstanceVarsJSON(v); err != nil {
			return err
		}
	}
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var missing []string
		err := tx.QueryRow(ctx, `
			SELECT COALESCE(array_agg(v::text), '{}') FROM unnest($3::jsonb[]) v
			WHERE NOT EXISTS (SELECT 1 FROM pipelines WHERE team_id = $1 AND name = $2 AND instance_vars = v)`,
			teamID, name, ivs).Scan(&missing)
		if err != nil {
			return fmt.Errorf("order the instances of %s: %w", name, err)
		}
		if len(missing) > 0 {
			return fmt.Errorf("order the instances of %s: no instance %v: %w", name, missing, ErrNotFound)
		}
		_, err = tx.Exec(ctx, `
			WITH wanted AS (SELECT v, i FROM unnest($3::jsonb[]) WITH ORDINALITY u(v, i)),
			ranked AS (
				SELECT p.id, row_number() OVER (ORDER BY w.i NULLS LAST, p.secondary_ordering, p.id) AS pos
				FROM pipelines p LEFT JOIN wanted w ON w.v = p.instance_vars
				WHERE p.team_id = $1 AND p.name = $2
			)
			UPDATE pipelines p SET secondary_ordering = r.pos FROM ranked r WHERE p.id = r.id`, teamID, name, ivs)
		if err != nil {
			return fmt.Errorf("order the instances of %s: %w", name, err)
		}
		return nil
	})
}

// PipelineByID looks a pipeline up by id.
func (d *DB) PipelineByID(ctx context.Context, id int64) (Pipeline, error) {
	p, err := scanPipeline(d.pool.QueryRow(ctx, "SELECT "+pipelineColumns+pipelineFrom+"WHERE p.id = $1", id))
	if err != nil {
		return Pipeline{}, pg.Classify(err, "pipeline %d", id)
	}
	return p, nil
}

// PipelineFilter selects pipelines: those of every team (AllTeams), of the
// teams TeamIDs, and the public ones of any team (Public).
type PipelineFilter struct {
	AllTeams bool
	TeamIDs  []int
	Public   bool
}

// Pipelines lists pipelines by team name, then each team's order.
func (d *DB) Pipelines(ctx context.Context, f PipelineFilter) ([]Pipeline, error) {
	ids := f.TeamIDs
	if ids == nil {
		ids = []int{}
	}
	rows, err := d.pool.Query(ctx, "SELECT "+pipelineColumns+pipelineFrom+`
		WHERE $1 OR p.team_id = ANY($2) OR ($3 AND p.public)
		ORDER BY t.name, p.ordering, p.name, p.secondary_ordering, p.id`, f.AllTeams, ids, f.Public)
	if err != nil {
		return nil, fmt.Errorf("list pipelines: %w", err)
	}
	ps, err := collectPipelines(rows)
	if err != nil {
		return nil, fmt.Errorf("list pipelines: %w", err)
	}
	return ps, nil
}

// execOne runs a statement that must touch exactly one row; none is
// ErrNotFound.
func (d *DB) execOne(ctx context.Context, what string, sql string, args ...any) error {
	return pg.ExecOne(ctx, d.pool, what, sql, args...)
}

// DeletePipeline deletes a pipeline with its jobs, resources, builds and
// versions.
func (d *DB) DeletePipeline(ctx context.Context, id int64) error {
	return d.execOne(ctx, fmt.Sprintf("delete pipeline %d", id), "DELETE FROM pipelines WHERE id = $1", id)
}

// PipelineUnfinishedBuilds lists the ids of a pipeline's pending and
// started builds (job and check builds).
func (d *DB) PipelineUnfinishedBuilds(ctx context.Context, pipelineID int64) ([]int64, error) {
	rows, err := d.pool.Query(ctx, `
		SELECT id FROM builds WHERE pipeline_id = $1 AND status IN ('pending', 'started') ORDER BY id`, pipelineID)
	if err != nil {
		return nil, fmt.Errorf("unfinished builds of pipeline %d: %w", pipelineID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("unfinished builds of pipeline %d: %w", pipelineID, err)
	}
	return ids, nil
}

// RenamePipeline renames a pipeline; a name the team already uses is
// ErrConflict.
func (d *DB) RenamePipeline(ctx context.Context, id int64, name string) error {
	return d.execOne(ctx, fmt.Sprintf("rename pipeline %d to %s", id, name),
		"UPDATE pipelines SET name = $2, last_updated = now() WHERE id = $1", id, name)
}

// PausePipeline pauses a pipeline; pausing a paused one keeps who paused
// it first, as in Concourse.
func (d *DB) PausePipeline(ctx context.Context, id int64, by string) error {
	return d.execOne(ctx, fmt.Sprintf("pause pipeline %d", id), `
		UPDATE pipelines SET paused = true,
			paused_by = CASE WHEN paused THEN paused_by ELSE $2 END,
			paused_at = CASE WHEN paused THEN paused_at ELSE now() END
		WHERE id = $1`, id, by)
}

// UnpausePipeline unpauses a pipeline and asks the scheduler to look at
// every job of it again.
func (d *DB) UnpausePipeline(ctx context.Context, id int64) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE pipelines SET paused = false, paused_by = '', paused_at = NULL WHERE id = $1`, id)
		if err != nil {
			return fmt.Errorf("unpause pipeline %d: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("unpause pipeline %d: %w", id, ErrNotFound)
		}
		if _, err := tx.Exec(ctx, `UPDATE jobs SET schedule_requested = now() WHERE pipeline_id = $1`, id); err != nil {
			return fmt.Errorf("unpause pipeline %d: request scheduling: %w", id, err)
		}
		return nil
	})
}

// SetPipelinePublic exposes (true) or hides a pipeline.
func (d *DB) SetPipelinePublic(ctx context.Context, id int64, public bool) error {
	return d.execOne(ctx, fmt.Sprintf("set pipeline %d public=%t", id, public),
		"UPDATE pipelines SET public = $2 WHERE id = $1", id, public)
}

// OrderPipelines puts the named pipelines of a team first, in that order;
// the others keep their order after them. A name the team has no pipeline
// of is ErrNotFound, and nothing changes.
func (d *DB) OrderPipelines(ctx context.Context, teamID int, names []string) error {
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var missing []string
		err := tx.QueryRow(ctx, `
			SELECT COALESCE(array_agg(n), '{}') FROM unnest($2::text[]) n
			WHERE NOT EXISTS (SELECT 1 FROM pipelines WHERE team_id = $1 AND name = n)`, teamID, names).Scan(&missing)
		if err != nil {
			return fmt.Errorf("order pipelines: %w", err)
		}
		if len(missing) > 0 {
			return fmt.Errorf("order pipelines: no pipeline %q: %w", missing, ErrNotFound)
		}
		_, err = tx.Exec(ctx, `
			WITH wanted AS (SELECT n, i FROM unnest($2::text[]) WITH ORDINALITY u(n, i)),
			ranked AS (
				SELECT p.id, row_number() OVER (ORDER BY w.i NULLS LAST, p.ordering, p.id) AS pos
				FROM pipelines p LEFT JOIN wanted w ON w.n = p.name
				WHERE p.team_id = $1
			)
			UPDATE pipelines p SET ordering = r.pos FROM ranked r WHERE p.id = r.id`, teamID, names)
		if err != nil {
			return fmt.Errorf("order pipelines: %w", err)
		}
		return nil
	})
}

// Job is a job of a pipeline.
type Job struct {
	ID           int64
	PipelineID   int64
	PipelineName string
	TeamID       int
	TeamName     string
	Name         string
	Config       json.RawMessage // Concourse's JobConfig (concourse.JobConfig) as JSON
	Active       bool            // false once the job is gone from the pipeline's config
	Paused       bool
	PausedBy     string
	PausedAt     time.Time
	// Filled by Jobs and Job: the latest finished build, and the oldest
	// pending or started one (what `fly jobs` shows as status and next).
	FinishedBuild, NextBuild *Build
}

const jobColumns = `j.id, j.pipeline_id, p.name, p.team_id, t.name, j.name, j.config, j.active, j.paused, j.paused_by, j.paused_at`

const jobFrom = " FROM jobs j JOIN pipelines p ON p.id = j.pipeline_id JOIN teams t ON t.id = p.team_id "

func scanJob(row pgx.Row) (Job, error) {
	var j Job
	var config []byte
	var pausedAt *time.Time
	err := row.Scan(&j.ID, &j.PipelineID, &j.PipelineName, &j.TeamID, &j.TeamName, &j.Name, &config, &j.Active,
		&j.Paused, &j.PausedBy, &pausedAt)
	if err != nil {
		return Job{}, err
	}
	j.Config, j.PausedAt = config, pg.NullTime(pausedAt)
	return j, nil
}

// Jobs lists a pipeline's active jobs in the order of its config, each with
// its finished and next build.
func (d *DB) Jobs(ctx context.Context, pipelineID int64) ([]Job, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+jobColumns+jobFrom+`
		WHERE j.pipeline_id = $1 AND j.active
		ORDER BY (SELECT e.i FROM jsonb_array_elements(p.config->'jobs') WITH ORDINALITY e(v, i)
			WHERE e.v->>'name' = j.name), j.id`, pipelineID)
	if err != nil {
		return nil, fmt.Errorf("jobs of pipeline %d: %w", pipelineID, err)
	}
	js, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Job, error) { return scanJob(r) })
	if err != nil {
		return nil, fmt.Errorf("jobs of pipeline %d: %w", pipelineID, err)
	}
	if err := d.fillJobBuilds(ctx, js); err != nil {
		return nil, fmt.Errorf("jobs of pipeline %d: %w", pipelineID, err)
	}
	return js, nil
}

// Job looks an active job of a pipeline up by name.
func (d *DB) Job(ctx context.Context, pipelineID int64, name string) (Job, error) {
	j, err := scanJob(d.pool.QueryRow(ctx, "SELECT "+jobColumns+jobFrom+"WHERE j.pipeline_id = $1 AND j.name = $2 AND j.active",
		pipelineID, name))
	if err != nil {
		return Job{}, pg.Classify(err, "job %s", name)
	}
	js := []Job{j}
	if err := d.fillJobBuilds(ctx, js); err != nil {
		return Job{}, fmt.Errorf("job %s: %w", name, err)
	}
	return js[0], nil
}

// fillJobBuilds reads every job's finished and next build in one round trip.
func (d *DB) fillJobBuilds(ctx context.Context, js []Job) error {
	if len(js) == 0 {
		return nil
	}
	var batch pgx.Batch
	for i := range js {
		j := &js[i]
		batch.Queue("SELECT "+buildColumns+buildFrom+`
			WHERE b.job_id = $1 AND b.status NOT IN ('pending', 'started') ORDER BY b.id DESC LIMIT 1`, j.ID).
			QueryRow(func(row pgx.Row) error { return scanOptionalBuild(row, &j.FinishedBuild) })
		batch.Queue("SELECT "+buildColumns+buildFrom+`
			WHERE b.job_id = $1 AND b.status IN ('pending', 'started') ORDER BY b.id LIMIT 1`, j.ID).
			QueryRow(func(row pgx.Row) error { return scanOptionalBuild(row, &j.NextBuild) })
	}
	if err := d.pool.SendBatch(ctx, &batch).Close(); err != nil {
		return fmt.Errorf("builds of jobs: %w", err)
	}
	return nil
}

func scanOptionalBuild(row pgx.Row, dst **Build) error {
	b, err := scanBuild(row)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return err
	}
	*dst = &b
	return nil
}

// PauseJob pauses a job (keeping who paused it first).
func (d *DB) PauseJob(ctx context.Context, id int64, by string) error {
	return d.execOne(ctx, fmt.Sprintf("pause job %d", id), `
		UPDATE jobs SET paused = true,
			paused_by = CASE WHEN paused THEN paused_by ELSE $2 END,
			paused_at = CASE WHEN paused THEN paused_at ELSE now() END
		WHERE id = $1`, id, by)
}

// UnpauseJob unpauses a job and asks the scheduler to look at it again.
func (d *DB) UnpauseJob(ctx context.Context, id int64) error {
	return d.execOne(ctx, fmt.Sprintf("unpause job %d", id), `
		UPDATE jobs SET paused = false, paused_by = '', paused_at = NULL, schedule_requested = now()
		WHERE id = $1`, id)
}

// Resource is a resource of a pipeline.
type Resource struct {
	ID           int64
	PipelineID   int64
	PipelineName string
	TeamID       int
	TeamName     string
	Name         string
	Type         string
	Config       json.RawMessage // Concourse's ResourceConfig (concourse.ResourceConfig) as JSON
	ConfigHash   string
	Active       bool
	CheckError   string
	// The last check; zero when none.
	LastCheckStart, LastCheckEnd time.Time
	LastCheckBuild               int64
	NextCheck                    time.Time
	// Pinned through the API (`fly pin-resource`); nil when not.
	APIPinnedVersion json.RawMessage
	PinComment       string
}

const resourceColumns = `r.id, r.pipeline_id, p.name, p.team_id, t.name, r.name, r.type, r.config, r.config_hash, r.active,
	r.check_error, r.last_check_start, r.last_check_end, r.last_check_build, r.next_check, r.api_pinned_version, r.pin_comment`

const resourceFrom = " FROM resources r JOIN pipelines p ON p.id = r.pipeline_id JOIN teams t ON t.id = p.team_id "

func scanResource(row pgx.Row) (Resource, error) {
	var r Resource
	var config, pinned []byte
	var start, end *time.Time
	var build *int64
	err := row.Scan(&r.ID, &r.PipelineID, &r.PipelineName, &r.TeamID, &r.TeamName, &r.Name, &r.Type, &config,
		&r.ConfigHash, &r.Active, &r.CheckError, &start, &end, &build, &r.NextCheck, &pinned, &r.PinComment)
	if err != nil {
		return Resource{}, err
	}
	r.Config, r.APIPinnedVersion = config, pinned
	r.LastCheckStart, r.LastCheckEnd = pg.NullTime(start), pg.NullTime(end)
	if build != nil {
		r.LastCheckBuild = *build
	}
	return r, nil
}

// Resources lists a pipeline's active resources in the order of its config.
func (d *DB) Resources(ctx context.Context, pipelineID int64) ([]Resource, error) {
	rs, err := d.ResourcesOfPipelines(ctx, []int64{pipelineID})
	if err != nil {
		return nil, fmt.Errorf("resources of pipeline %d: %w", pipelineID, err)
	}
	return rs, nil
}

// ResourcesOfPipelines lists the active resources of the pipelines in one
// query: the pipelines in the order given, each one's in the order of its
// config.
func (d *DB) ResourcesOfPipelines(ctx context.Context, pipelineIDs []int64) ([]Resource, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+resourceColumns+resourceFrom+`
		WHERE r.pipeline_id = ANY($1) AND r.active
		ORDER BY array_position($1::bigint[], r.pipeline_id),
			(SELECT e.i FROM jsonb_array_elements(p.config->'resources') WITH ORDINALITY e(v, i)
			WHERE e.v->>'name' = r.name), r.id`, pipelineIDs)
	if err != nil {
		return nil, fmt.Errorf("resources of %d pipelines: %w", len(pipelineIDs), err)
	}
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Resource, error) { return scanResource(r) })
	if err != nil {
		return nil, fmt.Errorf("resources of %d pipelines: %w", len(pipelineIDs), err)
	}
	return rs, nil
}

// Resource looks an active resource of a pipeline up by name.
func (d *DB) Resource(ctx context.Context, pipelineID int64, name string) (Resource, error) {
	r, err := scanResource(d.pool.QueryRow(ctx, "SELECT "+resourceColumns+resourceFrom+"WHERE r.pipeline_id = $1 AND r.name = $2 AND r.active",
		pipelineID, name))
	if err != nil {
		return Resource{}, pg.Classify(err, "resource %s", name)
	}
	return r, nil
}
