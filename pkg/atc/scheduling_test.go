package atc

import (
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/porter-ci/porter/pkg/atc/buildlog/buildlogtest"
	"github.com/porter-ci/porter/pkg/atc/exec"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/test/testenv"
)

// checkPlanner plans checks as the plan it holds; jobs are not planned.
type checkPlanner struct{ plan concourse.Plan }

func (checkPlanner) JobPlan(*concourse.Config, *concourse.JobConfig, map[string]map[string]string) (concourse.Plan, error) {
	return concourse.Plan{}, errors.New("no jobs here")
}

func (p checkPlanner) CheckPlan(*concourse.Config, *concourse.ResourceConfig, map[string]string) (concourse.Plan, error) {
	return p.plan, nil
}

// TestCheckBuildsRecordTheirEndOnTheResource runs check builds through the
// server's build path (real PostgreSQL and MinIO; plans that need no pod):
// a check that errors leaves its error on the resource, the next check
// runs anyway, and a check that succeeds clears it.
func TestCheckBuildsRecordTheirEndOnTheResource(t *testing.T) {
	ctx := t.Context()
	cl, err := testenv.ClusterEnv()
	if err != nil {
		t.Skip(err)
	}
	store, err := blobstore.Open(ctx, blobstore.Config{Driver: "minio", Endpoint: cl["PORTER_CLUSTER_MINIO_ENDPOINT"],
		Bucket: cl["PORTER_CLUSTER_MINIO_BUCKET"], Region: cl["PORTER_CLUSTER_MINIO_REGION"],
		AccessKey: cl["PORTER_CLUSTER_MINIO_ACCESS_KEY"], SecretKey: cl["PORTER_CLUSTER_MINIO_SECRET_KEY"],
		Secure: cl["PORTER_CLUSTER_MINIO_SECURE"] == "true"})
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := store.(interface{ CloseIdleConnections() }); ok {
		t.Cleanup(c.CloseIdleConnections)
	}
	dsn := testenv.Postgres(t)
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	d, team := openDB(t, dsn, log)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	const res = `{"name": "repo", "type": "mock", "source": {}, "check_every": "never"}`
	if _, err := conn.Exec(ctx, `WITH p AS (INSERT INTO pipelines (team_id, name, config) VALUES ($1, 'p', $2) RETURNING id)
		INSERT INTO resources (pipeline_id, name, type, config, config_hash) SELECT id, 'repo', 'mock', $3, 'h' FROM p`,
		team.ID, `{"resources": [`+res+`]}`, res); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		plan    string
		wantErr string
	}{
		{plan: `{"id": "1", "task": {"name": "check"}}`, wantErr: `task "check" has no config`},
		{plan: `{"id": "1", "do": []}`, wantErr: ""},
	} {
		var plan concourse.Plan
		if err := json.Unmarshal([]byte(tc.plan), &plan); err != nil {
			t.Fatal(err)
		}
		s := &Server{db: d, log: log, store: store, logs: buildlogtest.Logs(t, store), cfg: Config{ServerID: "s1"}, builds: map[int64]*buildstate.Build{}, steps: map[string]*exec.StepState{}}
		s.exec = s.newExec()
		s.sch = newScheduling(s, checkPlanner{plan: plan})
		r, err := d.LookupResource(ctx, team.ID, "p", "repo")
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.sch.checker.StartCheck(ctx, r, nil)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			r, err = d.ResourceByID(ctx, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			if r.LastCheckBuild == b.ID && !r.LastCheckEnd.Before(r.LastCheckStart) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("check build %d never ended: %+v", b.ID, r)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if r.CheckError != tc.wantErr {
			t.Fatalf("check of %s: error %q, want %q", tc.plan, r.CheckError, tc.wantErr)
		}
		if rec, _ := d.JobBuildByID(ctx, b.ID); rec.Name != "check" || rec.ResourceName != "repo" || !rec.Status.Finished() {
			t.Fatalf("check build %+v", rec)
		}
	}
}

// openDB opens the database at dsn, closed when the test ends, with its
// main team.
func openDB(t *testing.T, dsn string, log *slog.Logger) (*db.DB, db.Team) {
	t.Helper()
	d, err := db.Open(t.Context(), dsn, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	team, err := d.EnsureTeam(t.Context(), "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	return d, team
}
