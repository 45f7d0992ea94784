package db

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db/internal/pg"
)

// isFinal says whether a build ends in status; it never leaves it.
func isFinal(status concourse.BuildStatus) bool { return status.Finished() }

// Build is one build (for now: one-off builds from `execute`).
type Build struct {
	ID       int64
	TeamID   int
	TeamName string
	Name     string
	Status   concourse.BuildStatus
	Plan     json.RawMessage // the plan as the client sent it (Concourse's JSON)
	// State is the server's own record of the build's steps, to resume it
	// after a restart; opaque here.
	State                          json.RawMessage
	CreatedBy                      string
	CreateTime, StartTime, EndTime time.Time // zero when unset
	Server                         string    // the id of the server that runs it
	AbortRequested                 bool
	Comment                        string // a person's note on the build, '' when none
}

const buildColumns = `b.id, b.team_id, t.name, b.name, b.status, b.plan, b.state, b.created_by,
	b.create_time, b.start_time, b.end_time, b.server, b.abort_requested, b.comment`

const buildFrom = " FROM builds b JOIN teams t ON t.id = b.team_id "

func scanBuild(row pgx.Row) (Build, error) {
	var b Build
	var plan, state []byte
	var start, end *time.Time
	err := row.Scan(&b.ID, &b.TeamID, &b.TeamName, &b.Name, &b.Status, &plan, &state, &b.CreatedBy,
		&b.CreateTime, &start, &end, &b.Server, &b.AbortRequested, &b.Comment)
	if err != nil {
		return Build{}, err
	}
	b.Plan, b.State = plan, state
	b.StartTime, b.EndTime = pg.NullTime(start), pg.NullTime(end)
	return b, nil
}

func collectBuilds(rows pgx.Rows) ([]Build, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Build, error) { return scanBuild(r) })
}

// CreateOneOffBuild records a pending build of teamID whose name is its id.
func (d *DB) CreateOneOffBuild(ctx context.Context, teamID int, plan json.RawMessage, createdBy, server string) (Build, error) {
	// The id is drawn first so the name can be the id itself, in one statement.
	b, err := scanBuild(d.pool.QueryRow(ctx, `
		WITH n AS (SELECT nextval(pg_get_serial_sequence('builds', 'id')) AS id),
		b AS (
			INSERT INTO builds (id, team_id, name, status, plan, created_by, server)
			SELECT n.id, $1, n.id::text, 'pending', $2::jsonb, $3, $4 FROM n
			RETURNING *
		)
		SELECT `+buildColumns+" FROM b JOIN teams t ON t.id = b.team_id",
		teamID, pg.JSONArg(plan), createdBy, server))
	if err != nil {
		return Build{}, pg.Classify(err, "create build of team %d", teamID)
	}
	return b, nil
}

// Build looks a build up by id.
func (d *DB) Build(ctx context.Context, id int64) (Build, error) {
	b, err := scanBuild(d.pool.QueryRow(ctx, "SELECT "+buildColumns+buildFrom+"WHERE b.id = $1", id))
	if err != nil {
		return Build{}, pg.Classify(err, "build %d", id)
	}
	return b, nil
}

// BuildsByID looks builds up by id in one query; an id with no build is
// not in the map.
func (d *DB) BuildsByID(ctx context.Context, ids []int64) (map[int64]Build, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+buildColumns+buildFrom+"WHERE b.id = ANY($1)", ids)
	if err != nil {
		return nil, fmt.Errorf("look up %d builds: %w", len(ids), err)
	}
	bs, err := collectBuilds(rows)
	if err != nil {
		return nil, fmt.Errorf("look up %d builds: %w", len(ids), err)
	}
	out := make(map[int64]Build, len(bs))
	for _, b := range bs {
		out[b.ID] = b
	}
	return out, nil
}

// BuildFilter selects builds. Before and After are exclusive id bounds, as
// Concourse's page "until" and "since".
type BuildFilter struct {
	TeamIDs []int // nil: every team
	Limit   int   // 0: 50
	Before  int64 // only ids below; 0: no bound
	After   int64 // only ids above; 0: no bound
	Running bool  // only pending and started builds
	// PipelineID: only that pipeline's job builds; 0: any.
	PipelineID int64
	// StartedFrom and StartedTo bound the start time, inclusive (fly's
	// --since and --until); zero: no bound.
	StartedFrom, StartedTo time.Time
}

// Builds lists builds, newest first. With only After set, it is the Limit
// builds right after After (the next page towards the newest), not the newest.
func (d *DB) Builds(ctx context.Context, f BuildFilter) ([]JobBuild, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	order := "DESC"
	if f.After != 0 && f.Before == 0 {
		order = "ASC"
	}
	// Check builds are the resources' business, as in Concourse.
	rows, err := d.pool.Query(ctx, "SELECT "+jobBuildColumns+jobBuildFrom+`
		WHERE ($1::int[] IS NULL OR b.team_id = ANY($1))
		  AND b.resource_id IS NULL
		  AND ($2::bigint = 0 OR b.id < $2::bigint)
		  AND ($3::bigint = 0 OR b.id > $3::bigint)
		  AND (NOT $4 OR b.status IN ('pending', 'started'))
		  AND ($6 = 0 OR b.pipeline_id = $6)
		  AND ($7::timestamptz IS NULL OR b.start_time >= $7)
		  AND ($8::timestamptz IS NULL OR b.start_time <= $8)
		ORDER BY b.id `+order+" LIMIT $5",
		f.TeamIDs, f.Before, f.After, f.Running, limit, f.PipelineID, pg.TimeArg(f.StartedFrom), pg.TimeArg(f.StartedTo))
	if err != nil {
		return nil, fmt.Errorf("list builds: %w", err)
	}
	bs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobBuild, error) { return scanJobBuild(r) })
	if err != nil {
		return nil, fmt.Errorf("list builds: %w", err)
	}
	if order == "ASC" {
		slices.Reverse(bs)
	}
	return bs, nil
}

// StartBuild marks a pending build started. Starting a started build again (a
// resume) is a no-op; a finished one is ErrConflict.
func (d *DB) StartBuild(ctx context.Context, id int64, at time.Time) error {
	tag, err := d.pool.Exec(ctx, `
		UPDATE builds SET status = 'started', start_time = $2
		WHERE id = $1 AND status = 'pending'`, id, at)
	if err != nil {
		return fmt.Errorf("start build %d: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	status, err := d.buildStatus(ctx, id)
	if err != nil {
		return fmt.Errorf("start build %d: %w", id, err)
	}
	if status == concourse.StatusStarted {
		return nil
	}
	return fmt.Errorf("start build %d: it is %s: %w", id, status, ErrConflict)
}

// FinishBuild sets a final status. It returns ErrConflict if the build
// already has one: the first final status wins.
func (d *DB) FinishBuild(ctx context.Context, id int64, status concourse.BuildStatus, at time.Time) error {
	if !isFinal(status) {
		return fmt.Errorf("finish build %d: %q is not a final status", id, status)
	}
	tag, err := d.pool.Exec(ctx, `
		UPDATE builds SET status = $2, end_time = $3
		WHERE id = $1 AND status IN ('pending', 'started')`, id, status, at)
	if err != nil {
		return fmt.Errorf("finish build %d: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	current, err := d.buildStatus(ctx, id)
	if err != nil {
		return fmt.Errorf("finish build %d: %w", id, err)
	}
	return fmt.Errorf("finish build %d as %s: it is %s already: %w", id, status, current, ErrConflict)
}

func (d *DB) buildStatus(ctx context.Context, id int64) (concourse.BuildStatus, error) {
	var s concourse.BuildStatus
	if err := d.pool.QueryRow(ctx, "SELECT status FROM builds WHERE id = $1", id).Scan(&s); err != nil {
		return "", pg.Classify(err, "build %d", id)
	}
	return s, nil
}

// SaveBuildState replaces the server's record of the build's steps.
func (d *DB) SaveBuildState(ctx context.Context, id int64, state json.RawMessage) error {
	tag, err := d.pool.Exec(ctx, "UPDATE builds SET state = $2::jsonb WHERE id = $1", id, pg.JSONArg(state))
	if err != nil {
		return fmt.Errorf("save state of build %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("save state of build %d: %w", id, ErrNotFound)
	}
	return nil
}

// RequestAbort records that someone asked to abort the build; the server that
// runs it acts on it.
func (d *DB) RequestAbort(ctx context.Context, id int64) error {
	tag, err := d.pool.Exec(ctx, "UPDATE builds SET abort_requested = true WHERE id = $1", id)
	if err != nil {
		return fmt.Errorf("request abort of build %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("request abort of build %d: %w", id, ErrNotFound)
	}
	return nil
}

// SetBuildComment replaces the build's comment (an empty one removes it).
func (d *DB) SetBuildComment(ctx context.Context, id int64, comment string) error {
	tag, err := d.pool.Exec(ctx, "UPDATE builds SET comment = $2 WHERE id = $1", id, comment)
	if err != nil {
		return fmt.Errorf("set comment of build %d: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set comment of build %d: %w", id, ErrNotFound)
	}
	return nil
}

// UnfinishedBuilds lists the pending and started builds of a server, oldest
// first, for it to resume after a restart.
func (d *DB) UnfinishedBuilds(ctx context.Context, server string) ([]Build, error) {
	rows, err := d.pool.Query(ctx, "SELECT "+buildColumns+buildFrom+`
		WHERE b.server = $1 AND b.status IN ('pending', 'started') ORDER BY b.id`, server)
	if err != nil {
		return nil, fmt.Errorf("unfinished builds of server %s: %w", server, err)
	}
	bs, err := collectBuilds(rows)
	if err != nil {
		return nil, fmt.Errorf("unfinished builds of server %s: %w", server, err)
	}
	return bs, nil
}

// AbortsRequested lists the unfinished builds of a server that someone
// asked to abort through another server: the one running them polls this.
func (d *DB) AbortsRequested(ctx context.Context, server string) ([]int64, error) {
	rows, err := d.pool.Query(ctx, `
		SELECT id FROM builds
		WHERE server = $1 AND abort_requested AND status IN ('pending', 'started')`, server)
	if err != nil {
		return nil, fmt.Errorf("aborts requested of server %s: %w", server, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("aborts requested of server %s: %w", server, err)
	}
	return ids, nil
}

// EventChunk is one part of a build's log in the blobstore: events FirstID
// to LastID, inclusive, stored at Key; Length bytes from Offset when Length
// is not 0 (a part of a segment shared by many builds), else the whole
// object.
type EventChunk struct {
	FirstID, LastID uint64
	Key             string
	Offset, Length  int64
	// Contents says what the chunk holds (Known false: not recorded, as
	// for chunks written before it was).
	Contents ChunkContents
}

// ChunkContents is what a log chunk holds, so that a reader of a part of a
// huge log skips the chunks it does not need.
type ChunkContents struct {
	Known bool
	// Origins are the plan ids of the steps whose output (log events) the
	// chunk holds; Other says it holds some other event.
	Origins []string
	Other   bool
}

// AddEventChunk records a chunk of the build's events stored at key. A second
// chunk starting at the same event is ErrConflict.
func (d *DB) AddEventChunk(ctx context.Context, buildID int64, firstID, lastID uint64, key string) error {
	// Event ids count from 0 and never reach 2^63.
	_, err := d.pool.Exec(ctx, `
		INSERT INTO build_event_chunks (build_id, first_id, last_id, key) VALUES ($1, $2, $3, $4)`,
		buildID, int64(firstID), int64(lastID), key)
	if err != nil {
		return pg.Classify(err, "add event chunk %d-%d of build %d", firstID, lastID, buildID)
	}
	return nil
}

// BuildEventChunk is a chunk of one build's log.
type BuildEventChunk struct {
	BuildID int64
	EventChunk
}

// AddEventSegment records the chunks of one segment, all or none (one
// statement). A chunk starting at the same event as one recorded before
// replaces it when it reaches as far or further: it is a retry of a write
// whose answer was lost, holding the same events and more. Chunks of
// builds that no longer exist are left out, so one deleted build cannot
// fail the others' chunks forever.
func (d *DB) AddEventSegment(ctx context.Context, chunks []BuildEventChunk) error {
	if len(chunks) == 0 {
		return nil
	}
	n := len(chunks)
	builds, firsts, lasts := make([]int64, n), make([]int64, n), make([]int64, n)
	keys, offsets, lengths := make([]string, n), make([]int64, n), make([]int64, n)
	// A chunk's origins travel as one string each (plan ids hold no
	// newline): unnest flattens an array of arrays. NULL: not known.
	origins, others := make([]*string, n), make([]*bool, n)
	for i, c := range chunks {
		builds[i], firsts[i], lasts[i] = c.BuildID, int64(c.FirstID), int64(c.LastID)
		keys[i], offsets[i], lengths[i] = c.Key, c.Offset, c.Length
		if c.Contents.Known {
			o, other := strings.Join(c.Contents.Origins, "\n"), c.Contents.Other
			origins[i], others[i] = &o, &other
		}
	}
	_, err := d.pool.Exec(ctx, `
		INSERT INTO build_event_chunks (build_id, first_id, last_id, key, segment_offset, segment_length, log_origins, other_events)
		SELECT c.build_id, c.first_id, c.last_id, c.key, c.segment_offset, c.segment_length,
			CASE WHEN c.origins = '' THEN '{}'::text[] ELSE string_to_array(c.origins, E'\n') END, c.other
		FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[], $6::bigint[], $7::text[], $8::boolean[])
			AS c (build_id, first_id, last_id, key, segment_offset, segment_length, origins, other)
		JOIN builds b ON b.id = c.build_id
		ON CONFLICT (build_id, first_id) DO UPDATE SET
			last_id = EXCLUDED.last_id, key = EXCLUDED.key,
			segment_offset = EXCLUDED.segment_offset, segment_length = EXCLUDED.segment_length,
			log_origins = EXCLUDED.log_origins, other_events = EXCLUDED.other_events
		WHERE build_event_chunks.last_id <= EXCLUDED.last_id`,
		builds, firsts, lasts, keys, offsets, lengths, origins, others)
	if err != nil {
		return fmt.Errorf("add %d event chunks of segment %s: %w", n, chunks[0].Key, err)
	}
	return nil
}

// EventChunks lists the chunks of a build's log in event order.
func (d *DB) EventChunks(ctx context.Context, buildID int64) ([]EventChunk, error) {
	rows, err := d.pool.Query(ctx, `
		SELECT first_id, last_id, key, segment_offset, segment_length, log_origins, other_events
		FROM build_event_chunks WHERE build_id = $1 ORDER BY first_id`, buildID)
	if err != nil {
		return nil, fmt.Errorf("event chunks of build %d: %w", buildID, err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (EventChunk, error) {
		var first, last int64
		var c EventChunk
		var other *bool
		err := r.Scan(&first, &last, &c.Key, &c.Offset, &c.Length, &c.Contents.Origins, &other)
		c.FirstID, c.LastID = uint64(first), uint64(last)
		if other != nil {
			c.Contents.Known, c.Contents.Other = true, *other
		}
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("event chunks of build %d: %w", buildID, err)
	}
	return cs, nil
}
