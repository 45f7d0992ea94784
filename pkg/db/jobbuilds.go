package db

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/porter-ci/porter/pkg/db/internal/pg"
)

// JobRef is what the scheduler and the job build routes need of a job.
type JobRef struct {
	ID           int64
	PipelineID   int64
	PipelineName string
	TeamID       int
	TeamName     string
	Name         string
	Config       json.RawMessage // concourse.JobConfig
	Active       bool
	Paused       bool
	// PipelinePaused: a paused pipeline's jobs are not scheduled.
	PipelinePaused bool
	// PipelineConfig is the whole pipeline's config (concourse.Config).
	PipelineConfig    json.RawMessage
	ScheduleRequested time.Time
	LastScheduled     time.Time
	WaitingReason     string
}

const jobRefColumns = `j.id, j.pipeline_id, p.name, p.team_id, t.name, j.name, j.config, j.active, j.paused, p.paused,
	p.config, j.schedule_requested, j.last_scheduled, j.waiting_reason`

const jobRefFrom = ` FROM jobs j JOIN pipelines p ON p.id = j.pipeline_id JOIN teams t ON t.id = p.team_id `

func scanJobRef(row pgx.Row) (JobRef, error) {
	var j JobRef
	err := row.Scan(&j.ID, &j.PipelineID, &j.PipelineName, &j.TeamID, &j.TeamName, &j.Name, &j.Config, &j.Active, &j.Paused,
		&j.PipelinePaused, &j.PipelineConfig, &j.ScheduleRequested, &j.LastScheduled, &j.WaitingReason)
	return j, err
}

func collectJobRefs(rows pgx.Rows) ([]JobRef, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobRef, error) { return scanJobRef(r) })
}

// LookupJob finds an active job of a team's pipeline by name.
func (d *DB) LookupJob(ctx context.Context, teamID int, pipeline, job string) (JobRef, error) {
	j, err := scanJobRef(d.pool.QueryRow(ctx, "SELECT "+jobRefColumns+jobRefFrom+`
		WHERE p.team_id = $1 AND p.name = $2 AND j.name = $3 AND j.active`, teamID, pipeline, job))
	if err != nil {
		return JobRef{}, pg.Classify(err, "job %s/%s", pipeline, job)
	}
	return j, nil
}

// LookupPipelineJob finds an active job of a pipeline (an instance of an
// instanced pipeline, say) by name.
func (d *DB) LookupPipelineJob(ctx context.Context, pipelineID int64, job string) (JobRef, error) {
	j, err := scanJobRef(d.pool.QueryRow(ctx, "SELECT "+jobRefColumns+jobRefFrom+`
		WHERE j.pipeline_id = $1 AND j.name = $2 AND j.active`, pipelineID, job))
	if err != nil {
		return JobRef{}, pg.Classify(err, "job %s of pipeline %d", job, pipelineID)
	}
	return j, nil
}

// JobByID looks a job up by id.
func (d *DB) JobByID(ctx context.Context, id int64) (JobRef, error) {
	j, err := scanJobRef(d.pool.QueryRow(ctx, "SELECT "+jobRefColumns+jobRefFrom+"WHERE j.id = $1", id))
	if err != nil {
		return JobRef{}, pg.Classify(err, "job %d", id)
	}
	return j, nil
}

// SchedulableJobs lists the active, unpaused jobs of unpaused pipelines.
func (d *DB) SchedulableJobs(ctx context.Context) ([]JobRef, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+jobRefColumns+jobRefFrom+`
		WHERE j.active AND NOT j.paused AND NOT p.paused ORDER BY p.id, j.id`)
	if err != nil {
		return nil, fmt.Errorf("schedulable jobs: %w", err)
	}
	js, err := collectJobRefs(rows)
	if err != nil {
		return nil, fmt.Errorf("schedulable jobs: %w", err)
	}
	return js, nil
}

// RequestSchedule asks the scheduler to look at the job again.
func (d *DB) RequestSchedule(ctx context.Context, jobID int64) error {
	if _, err := d.pool.Exec(ctx, "UPDATE jobs SET schedule_requested = now() WHERE id = $1", jobID); err != nil {
		return fmt.Errorf("request scheduling of job %d: %w", jobID, err)
	}
	return nil
}

// SetWaitingReason records why the job's next build cannot start (empty when
// nothing blocks it) and when the scheduler looked.
func (d *DB) SetWaitingReason(ctx context.Context, jobID int64, reason string, at time.Time) error {
	if _, err := d.pool.Exec(ctx, "UPDATE jobs SET waiting_reason = $2, last_scheduled = $3 WHERE id = $1", jobID, reason, at); err != nil {
		return fmt.Errorf("record the waiting reason of job %d: %w", jobID, err)
	}
	return nil
}

// JobBuild is a build with what ties it to a pipeline: a job's build, or a
// resource's check build.
type JobBuild struct {
	Build
	PipelineID   int64
	PipelineName string
	JobID        int64 // 0 for a check build
	JobName      string
	ResourceID   int64 // 0 for a job build
	ResourceName string
	RerunOf      int64
	RerunNumber  int
	// ResumedFrom is the failed build this one resumes (0: none): its plan
	// is that build's, its state starts with that build's steps that
	// succeeded.
	ResumedFrom       int64
	ManuallyTriggered bool
	InputsReady       bool
	// PipelineInstanceVars are the instance vars of the build's pipeline
	// (nil for an ordinary pipeline).
	PipelineInstanceVars map[string]any
}

const jobBuildColumns = buildColumns + `, COALESCE(b.pipeline_id, 0), COALESCE(p.name, ''), COALESCE(b.job_id, 0), COALESCE(j.name, ''),
	COALESCE(b.resource_id, 0), COALESCE(r.name, ''), COALESCE(b.rerun_of, 0), b.rerun_number, b.manually_triggered, b.inputs_ready,
	COALESCE(p.instance_vars, '{}'), COALESCE(b.resumed_from, 0)`

const jobBuildFrom = buildFrom + ` LEFT JOIN pipelines p ON p.id = b.pipeline_id LEFT JOIN jobs j ON j.id = b.job_id
	LEFT JOIN resources r ON r.id = b.resource_id `

func scanJobBuild(row pgx.Row) (JobBuild, error) {
	var b JobBuild
	var plan, state []byte
	var start, end *time.Time
	var instanceVars []byte
	err := row.Scan(&b.ID, &b.TeamID, &b.TeamName, &b.Name, &b.Status, &plan, &state, &b.CreatedBy,
		&b.CreateTime, &start, &end, &b.Server, &b.AbortRequested, &b.Comment,
		&b.PipelineID, &b.PipelineName, &b.JobID, &b.JobName, &b.ResourceID, &b.ResourceName, &b.RerunOf, &b.RerunNumber,
		&b.ManuallyTriggered, &b.InputsReady, &instanceVars, &b.ResumedFrom)
	if err != nil {
		return JobBuild{}, err
	}
	if err := json.Unmarshal(instanceVars, &b.PipelineInstanceVars); err != nil {
		return JobBuild{}, fmt.Errorf("instance vars of build %d's pipeline: %w", b.ID, err)
	}
	if len(b.PipelineInstanceVars) == 0 {
		b.PipelineInstanceVars = nil
	}
	b.Plan, b.State = plan, state
	b.StartTime, b.EndTime = pg.NullTime(start), pg.NullTime(end)
	return b, nil
}

func collectJobBuilds(rows pgx.Rows) ([]JobBuild, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobBuild, error) { return scanJobBuild(r) })
}

// JobBuildByID looks a build up by id, with its pipeline, job or resource.
func (d *DB) JobBuildByID(ctx context.Context, id int64) (JobBuild, error) {
	b, err := scanJobBuild(d.pool.QueryRow(ctx, "SELECT "+jobBuildColumns+jobBuildFrom+"WHERE b.id = $1", id))
	if err != nil {
		return JobBuild{}, pg.Classify(err, "build %d", id)
	}
	return b, nil
}

// JobBuildByName finds a job's build by name ("3", "3.1").
func (d *DB) JobBuildByName(ctx context.Context, jobID int64, name string) (JobBuild, error) {
	b, err := scanJobBuild(d.pool.QueryRow(ctx, "SELECT "+jobBuildColumns+jobBuildFrom+"WHERE b.job_id = $1 AND b.name = $2", jobID, name))
	if err != nil {
		return JobBuild{}, pg.Classify(err, "build %s of job %d", name, jobID)
	}
	return b, nil
}

// CreateJobBuild records a pending build of the job named after the job's
// next build number. The scheduler chooses its inputs unless inputs are
// given (then they are recorded with it and it is ready to start).
func (d *DB) CreateJobBuild(ctx context.Context, jobID int64, createdBy string, manual bool, inputs []BuildInput) (JobBuild, error) {
	var id int64
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var seq int
		var pipelineID int64
		var teamID int
		err := tx.QueryRow(ctx, `
			UPDATE jobs j SET build_number_seq = build_number_seq + 1, schedule_requested = now()
			FROM pipelines p WHERE j.id = $1 AND p.id = j.pipeline_id
			RETURNING j.build_number_seq, j.pipeline_id, p.team_id`, jobID).Scan(&seq, &pipelineID, &teamID)
		if err != nil {
			return pg.Classify(err, "job %d", jobID)
		}
		err = tx.QueryRow(ctx, `
			INSERT INTO builds (team_id, name, status, created_by, pipeline_id, job_id, manually_triggered, inputs_ready)
			VALUES ($1, $2, 'pending', $3, $4, $5, $6, $7) RETURNING id`,
			teamID, strconv.Itoa(seq), createdBy, pipelineID, jobID, manual, inputs != nil).Scan(&id)
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if inputs != nil {
			return saveInputs(ctx, tx, id, jobID, inputs)
		}
		return nil
	})
	if err != nil {
		return JobBuild{}, fmt.Errorf("create a build of job %d: %w", jobID, err)
	}
	return d.JobBuildByID(ctx, id)
}

// RerunJobBuild records a pending build of the job with the same inputs as
// b, named "<b>.<n>" (a rerun of a rerun counts under the original).
func (d *DB) RerunJobBuild(ctx context.Context, b JobBuild, createdBy string) (JobBuild, error) {
	return d.rerun(ctx, b, createdBy, nil)
}

// Resume is what a build resuming another starts with: that build's plan
// and the state its steps start from.
type Resume struct {
	Plan, State json.RawMessage
}

// ResumeJobBuild records a pending rerun of b (named as RerunJobBuild
// names it) that resumes b: it runs b's plan from state.
func (d *DB) ResumeJobBuild(ctx context.Context, b JobBuild, createdBy string, r Resume) (JobBuild, error) {
	return d.rerun(ctx, b, createdBy, &r)
}

func (d *DB) rerun(ctx context.Context, b JobBuild, createdBy string, resume *Resume) (JobBuild, error) {
	if b.JobID == 0 {
		return JobBuild{}, fmt.Errorf("rerun build %d: it is not a job's build", b.ID)
	}
	orig := b.ID
	base := b.Name
	if b.RerunOf != 0 {
		orig = b.RerunOf
		base, _, _ = strings.Cut(b.Name, ".")
	}
	var id int64
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		// Locking the original serialises concurrent reruns of it.
		var teamID int
		var pipelineID int64
		if err := tx.QueryRow(ctx, "SELECT team_id, pipeline_id FROM builds WHERE id = $1 FOR UPDATE", orig).Scan(&teamID, &pipelineID); err != nil {
			return pg.Classify(err, "build %d", orig)
		}
		var n int
		if err := tx.QueryRow(ctx, "SELECT COALESCE(MAX(rerun_number), 0) + 1 FROM builds WHERE rerun_of = $1", orig).Scan(&n); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `
			INSERT INTO builds (team_id, name, status, created_by, pipeline_id, job_id, manually_triggered, inputs_ready, rerun_of, rerun_number)
			VALUES ($1, $2, 'pending', $3, $4, $5, true, true, $6, $7) RETURNING id`,
			teamID, fmt.Sprintf("%s.%d", base, n), createdBy, pipelineID, b.JobID, orig, n).Scan(&id)
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO build_resource_versions (build_id, job_id, name, resource_id, version_id, is_input, first_occurrence)
			SELECT $1, job_id, name, resource_id, version_id, true, false FROM build_resource_versions
			WHERE build_id = $2 AND is_input`, id, b.ID); err != nil {
			return fmt.Errorf("copy inputs: %w", err)
		}
		if resume != nil {
			if _, err := tx.Exec(ctx, "UPDATE builds SET resumed_from = $2, plan = $3::jsonb, state = $4::jsonb WHERE id = $1",
				id, b.ID, pg.JSONArg(resume.Plan), pg.JSONArg(resume.State)); err != nil {
				return fmt.Errorf("record what it resumes: %w", err)
			}
		}
		_, err = tx.Exec(ctx, "UPDATE jobs SET schedule_requested = now() WHERE id = $1", b.JobID)
		return err
	})
	if err != nil {
		return JobBuild{}, fmt.Errorf("rerun build %d: %w", b.ID, err)
	}
	return d.JobBuildByID(ctx, id)
}

// JobBuilds lists a job's builds, newest first, paged by build id as
// Builds is.
func (d *DB) JobBuilds(ctx context.Context, jobID int64, f BuildFilter) ([]JobBuild, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	order := "DESC"
	if f.After != 0 && f.Before == 0 {
		order = "ASC"
	}
	rows, err := d.pool.Query(ctx, "SELECT "+jobBuildColumns+jobBuildFrom+`
		WHERE b.job_id = $1 AND ($2::bigint = 0 OR b.id < $2::bigint) AND ($3::bigint = 0 OR b.id > $3::bigint)
		  AND (NOT $4 OR b.status IN ('pending', 'started'))
		  AND ($6::timestamptz IS NULL OR b.start_time >= $6)
		  AND ($7::timestamptz IS NULL OR b.start_time <= $7)
		ORDER BY b.id `+order+" LIMIT $5", jobID, f.Before, f.After, f.Running, limit, pg.TimeArg(f.StartedFrom), pg.TimeArg(f.StartedTo))
	if err != nil {
		return nil, fmt.Errorf("builds of job %d: %w", jobID, err)
	}
	bs, err := collectJobBuilds(rows)
	if err != nil {
		return nil, fmt.Errorf("builds of job %d: %w", jobID, err)
	}
	if order == "ASC" {
		slices.Reverse(bs)
	}
	return bs, nil
}

// JobNextAndFinished are what the API shows of a job: its oldest pending or
// started build and its newest finished one (nil when none).
func (d *DB) JobNextAndFinished(ctx context.Context, jobID int64) (next, finished *JobBuild, err error) {
	rows, err := d.pool.Query(ctx, `
		(SELECT `+jobBuildColumns+jobBuildFrom+` WHERE b.job_id = $1 AND b.status IN ('pending', 'started') ORDER BY b.id LIMIT 1)
		UNION ALL
		(SELECT `+jobBuildColumns+jobBuildFrom+` WHERE b.job_id = $1 AND b.status NOT IN ('pending', 'started') ORDER BY b.id DESC LIMIT 1)`, jobID)
	if err != nil {
		return nil, nil, fmt.Errorf("next and finished builds of job %d: %w", jobID, err)
	}
	bs, err := collectJobBuilds(rows)
	if err != nil {
		return nil, nil, fmt.Errorf("next and finished builds of job %d: %w", jobID, err)
	}
	for i := range bs {
		if isFinal(bs[i].Status) {
			finished = &bs[i]
		} else {
			next = &bs[i]
		}
	}
	return next, finished, nil
}

// UnfinishedJobBuilds lists the pending and started builds of the jobs,
// oldest first.
func (d *DB) UnfinishedJobBuilds(ctx context.Context, jobIDs []int64) ([]JobBuild, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+jobBuildColumns+jobBuildFrom+`
		WHERE b.job_id = ANY($1) AND b.status IN ('pending', 'started') ORDER BY b.id`, jobIDs)
	if err != nil {
		return nil, fmt.Errorf("unfinished builds of jobs %v: %w", jobIDs, err)
	}
	bs, err := collectJobBuilds(rows)
	if err != nil {
		return nil, fmt.Errorf("unfinished builds of jobs %v: %w", jobIDs, err)
	}
	return bs, nil
}

// AbortedPendingJobBuilds lists the job builds aborted before they started,
// paused jobs' included: the scheduler ends them (aborted) at its next look.
func (d *DB) AbortedPendingJobBuilds(ctx context.Context) ([]JobBuild, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+jobBuildColumns+jobBuildFrom+`
		WHERE b.status = 'pending' AND b.abort_requested AND b.job_id IS NOT NULL ORDER BY b.id`)
	if err != nil {
		return nil, fmt.Errorf("aborted pending job builds: %w", err)
	}
	bs, err := collectJobBuilds(rows)
	if err != nil {
		return nil, fmt.Errorf("aborted pending job builds: %w", err)
	}
	return bs, nil
}

// StartJobBuild gives a pending job build its plan and the server that runs
// it, and marks it started. ErrConflict when it is no longer pending.
func (d *DB) StartJobBuild(ctx context.Context, id int64, plan json.RawMessage, server string, at time.Time) error {
	tag, err := d.pool.Exec(ctx, `
		UPDATE builds SET status = 'started', plan = $2::jsonb, server = $3, start_time = $4, inputs_ready = true
		WHERE id = $1 AND status = 'pending'`, id, pg.JSONArg(plan), server, at)
	if err != nil {
		return fmt.Errorf("start build %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("start build %d: it is no longer pending: %w", id, ErrConflict)
	}
	return nil
}

// BuildInput is a version a job build uses (or used) as an input.
type BuildInput struct {
	Name       string
	ResourceID int64
	VersionID  int64
}

// saveInputs records a build's inputs; an input is a first occurrence
// when no earlier build of the job had that version under that name.
func saveInputs(ctx context.Context, tx pgx.Tx, buildID, jobID int64, inputs []BuildInput) error {
	for _, in := range inputs {
		_, err := tx.Exec(ctx, `
			INSERT INTO build_resource_versions (build_id, job_id, name, resource_id, version_id, is_input, first_occurrence)
			VALUES ($1, $2, $3, $4, $5, true, NOT EXISTS (
				SELECT 1 FROM build_resource_versions
				WHERE job_id = $2 AND name = $3 AND version_id = $5 AND is_input AND build_id <> $1))
			ON CONFLICT DO NOTHING`, buildID, jobID, in.Name, in.ResourceID, in.VersionID)
		if err != nil {
			return fmt.Errorf("record input %s of build %d: %w", in.Name, buildID, err)
		}
	}
	return nil
}

// SaveBuildInputs records a pending build's chosen inputs and marks it
// ready to start.
func (d *DB) SaveBuildInputs(ctx context.Context, buildID, jobID int64, inputs []BuildInput) error {
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if err := saveInputs(ctx, tx, buildID, jobID, inputs); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE builds SET inputs_ready = true WHERE id = $1", buildID)
		return err
	})
	if err != nil {
		return fmt.Errorf("save the inputs of build %d: %w", buildID, err)
	}
	return nil
}

// SaveBuildVersion records a version a job build's get (input) or put
// (output) step reported, saving the version first if it is new (a put's
// output usually is).
func (d *DB) SaveBuildVersion(ctx context.Context, buildID, jobID int64, name string, resourceID int64, v NewVersion, input bool) error {
	ver, err := d.FindVersion(ctx, resourceID, v.Version)
	if err == nil && len(v.Metadata) > 0 {
		// A check reports versions without metadata; a get of one reports
		// it, and the version keeps it (as Concourse's get does). Every get
		// of the version reports it again: only a change is written.
		meta, err := json.Marshal(v.Metadata)
		if err != nil {
			return fmt.Errorf("encode the metadata of version %d: %w", ver.ID, err)
		}
		if _, err := d.pool.Exec(ctx, "UPDATE resource_versions SET metadata = $2::jsonb WHERE id = $1 AND metadata IS DISTINCT FROM $2::jsonb", ver.ID, string(meta)); err != nil {
			return fmt.Errorf("save the metadata of version %d: %w", ver.ID, err)
		}
	}
	if err != nil {
		if _, err := d.SaveVersions(ctx, resourceID, []NewVersion{v}); err != nil {
			return err
		}
		if ver, err = d.FindVersion(ctx, resourceID, v.Version); err != nil {
			return err
		}
	}
	if input {
		return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			return saveInputs(ctx, tx, buildID, jobID, []BuildInput{{Name: name, ResourceID: resourceID, VersionID: ver.ID}})
		})
	}
	_, err = d.pool.Exec(ctx, `
		INSERT INTO build_resource_versions (build_id, job_id, name, resource_id, version_id, is_input)
		VALUES ($1, $2, $3, $4, $5, false) ON CONFLICT DO NOTHING`, buildID, jobID, name, resourceID, ver.ID)
	if err != nil {
		return fmt.Errorf("record output %s of build %d: %w", name, buildID, err)
	}
	return nil
}

// BuildVersion is one input or output of a job build.
type BuildVersion struct {
	Name            string
	ResourceID      int64
	ResourceName    string
	Version         Version
	Input           bool
	FirstOccurrence bool
}

// BuildVersions lists a build's inputs and outputs.
func (d *DB) BuildVersions(ctx context.Context, buildID int64) ([]BuildVersion, error) {
	rows, err := d.pool.Query(ctx, `
		SELECT brv.name, brv.resource_id, r.name, brv.is_input, brv.first_occurrence, `+versionColumns+`
		FROM build_resource_versions brv JOIN resources r ON r.id = brv.resource_id
		JOIN resource_versions v ON v.id = brv.version_id
		WHERE brv.build_id = $1 ORDER BY brv.is_input DESC, brv.name`, buildID)
	if err != nil {
		return nil, fmt.Errorf("versions of build %d: %w", buildID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (BuildVersion, error) {
		var bv BuildVersion
		var version, meta []byte
		err := r.Scan(&bv.Name, &bv.ResourceID, &bv.ResourceName, &bv.Input, &bv.FirstOccurrence,
			&bv.Version.ID, &bv.Version.ResourceID, &version, &meta, &bv.Version.Enabled, &bv.Version.CheckOrder, &bv.Version.CreateTime)
		if err != nil {
			return bv, err
		}
		if err := json.Unmarshal(version, &bv.Version.Version); err != nil {
			return bv, err
		}
		if len(meta) > 0 {
			err = json.Unmarshal(meta, &bv.Version.Metadata)
		}
		return bv, err
	})
	if err != nil {
		return nil, fmt.Errorf("versions of build %d: %w", buildID, err)
	}
	return out, nil
}

// JobInputHistory says which versions the job ever used (in any build,
// pending ones included) under each input name: name -> version ids. A
// trigger input whose chosen version is not in here is new.
func (d *DB) JobInputHistory(ctx context.Context, jobID int64) (map[string]map[int64]bool, error) {
	rows, err := d.pool.Query(ctx, `
		SELECT DISTINCT name, version_id FROM build_resource_versions WHERE job_id = $1 AND is_input`, jobID)
	if err != nil {
		return nil, fmt.Errorf("input history of job %d: %w", jobID, err)
	}
	out := map[string]map[int64]bool{}
	var name string
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&name, &id}, func() error {
		if out[name] == nil {
			out[name] = map[int64]bool{}
		}
		out[name][id] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("input history of job %d: %w", jobID, err)
	}
	return out, nil
}

// LastInputs are the inputs of the job's newest build that has inputs:
// name -> version id (what `version: every` continues after).
func (d *DB) LastInputs(ctx context.Context, jobID int64) (map[string]int64, error) {
	rows, err := d.pool.Query(ctx, `
		SELECT name, version_id FROM build_resource_versions WHERE is_input AND build_id = (
			SELECT MAX(build_id) FROM build_resource_versions WHERE job_id = $1 AND is_input)`, jobID)
	if err != nil {
		return nil, fmt.Errorf("last inputs of job %d: %w", jobID, err)
	}
	out := map[string]int64{}
	var name string
	var id int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &id}, func() error { out[name] = id; return nil }); err != nil {
		return nil, fmt.Errorf("last inputs of job %d: %w", jobID, err)
	}
	return out, nil
}

// PassedBuilds says, for a job and a resource, which succeeded builds of
// the job had each version of the resource as an input or an output:
// version id -> build ids. A version passed the job when it has any.
func (d *DB) PassedBuilds(ctx context.Context, jobID, resourceID int64) (map[int64][]int64, error) {
	rows, err := d.pool.Query(ctx, `
		SELECT DISTINCT brv.version_id, brv.build_id FROM build_resource_versions brv
		JOIN builds b ON b.id = brv.build_id
		WHERE brv.job_id = $1 AND brv.resource_id = $2 AND b.status = 'succeeded'`, jobID, resourceID)
	if err != nil {
		return nil, fmt.Errorf("versions of resource %d that passed job %d: %w", resourceID, jobID, err)
	}
	out := map[int64][]int64{}
	var v, b int64
	if _, err := pgx.ForEachRow(rows, []any{&v, &b}, func() error { out[v] = append(out[v], b); return nil }); err != nil {
		return nil, fmt.Errorf("versions of resource %d that passed job %d: %w", resourceID, jobID, err)
	}
	return out, nil
}

// VersionBuilds lists the job builds that had a resource's version as an
// input (input) or produced it (!input), newest first: Concourse's
// input_to and output_of.
func (d *DB) VersionBuilds(ctx context.Context, resourceID, versionID int64, input bool) ([]JobBuild, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+jobBuildColumns+jobBuildFrom+`
		WHERE b.id IN (SELECT brv.build_id FROM build_resource_versions brv
		               WHERE brv.resource_id = $1 AND brv.version_id = $2 AND brv.is_input = $3)
		ORDER BY b.id DESC`, resourceID, versionID, input)
	if err != nil {
		return nil, fmt.Errorf("builds of version %d: %w", versionID, err)
	}
	bs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobBuild, error) { return scanJobBuild(r) })
	if err != nil {
		return nil, fmt.Errorf("builds of version %d: %w", versionID, err)
	}
	return bs, nil
}
