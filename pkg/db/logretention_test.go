package db

import (
	"fmt"
	"slices"
	"testing"
)

func TestReapBuildLogs(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, err := d.EnsureTeam(ctx, "main", TeamAuth{})
	if err != nil {
		t.Fatal(err)
	}
	var jobID int64
	if err := d.pool.QueryRow(ctx, `WITH p AS (INSERT INTO pipelines (team_id, name, config) VALUES ($1, 'p', '{}') RETURNING id)
		INSERT INTO jobs (pipeline_id, name, config) SELECT id, 'j', '{"name":"j","build_log_retention":{"builds":1}}' FROM p RETURNING id`,
		team.ID).Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := range 3 {
		var id int64
		end := "now()"
		if i == 2 {
			end = "NULL" // still running
		}
		if err := d.pool.QueryRow(ctx, fmt.Sprintf(`INSERT INTO builds (team_id, name, status, job_id, end_time)
			VALUES ($1, $2, 'succeeded', $3, %s) RETURNING id`, end), team.ID, fmt.Sprint(i+1), jobID).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		key := fmt.Sprintf("atc/segments/%d.zst", i)
		if err := d.AddEventSegment(ctx, []BuildEventChunk{{BuildID: id, EventChunk: EventChunk{FirstID: 1, LastID: 5, Key: key, Length: 10}}}); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := d.JobLogConfigs(ctx)
	if err != nil || len(jobs) != 1 || jobs[0].JobID != jobID {
		t.Fatalf("JobLogConfigs = %+v, %v", jobs, err)
	}
	logged, err := d.LoggedBuilds(ctx, jobID)
	if err != nil {
		t.Fatal(err)
	}
	if len(logged) != 3 || logged[0].ID != ids[2] || !logged[0].EndTime.IsZero() || logged[2].EndTime.IsZero() {
		t.Fatalf("LoggedBuilds (newest first, the running one without an end) = %+v", logged)
	}

	// The oldest and the running build: only the finished one is reaped.
	n, err := d.ReapBuildLogs(ctx, []int64{ids[0], ids[2]})
	if err != nil || n != 1 {
		t.Fatalf("ReapBuildLogs = %d, %v; want 1", n, err)
	}
	if chunks, err := d.EventChunks(ctx, ids[0]); err != nil || len(chunks) != 0 {
		t.Fatalf("the reaped build's chunks: %+v %v", chunks, err)
	}
	if chunks, err := d.EventChunks(ctx, ids[2]); err != nil || len(chunks) != 1 {
		t.Fatalf("the running build's chunks: %+v %v", chunks, err)
	}
	if got, err := d.UnreferencedEventObjects(ctx, 10); err != nil || !slices.Equal(got, []string{"atc/segments/0.zst"}) {
		t.Fatalf("unreferenced objects after the reap = %v, %v", got, err)
	}
	logged, err = d.LoggedBuilds(ctx, jobID)
	if err != nil || len(logged) != 2 || logged[1].ID != ids[1] {
		t.Fatalf("LoggedBuilds after the reap = %+v, %v", logged, err)
	}
	// A paused job is left alone.
	if _, err := d.pool.Exec(ctx, "UPDATE jobs SET paused = true WHERE id = $1", jobID); err != nil {
		t.Fatal(err)
	}
	if jobs, err := d.JobLogConfigs(ctx); err != nil || len(jobs) != 0 {
		t.Fatalf("JobLogConfigs with the job paused = %+v, %v", jobs, err)
	}
}
