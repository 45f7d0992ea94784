package exec

import (
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/test/testenv"
)

// TestResourceHooksRecordVersions drives the hooks the get, put and check
// steps call against a real database: a check build's versions are saved
// for its resource, a job build's get and put versions are recorded (a
// put's version is saved first), and one-off builds record nothing.
func TestResourceHooksRecordVersions(t *testing.T) {
	ctx := t.Context()
	dsn := testenv.Postgres(t)
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	d, err := db.Open(ctx, dsn, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	s := &Runner{db: d, log: log, engine: &wakeCounter{}}

	team, err := d.EnsureTeam(ctx, "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var pipeline, jobID int64
	if err := conn.QueryRow(ctx, `INSERT INTO pipelines (team_id, name, config) VALUES ($1, 'p', '{}') RETURNING id`, team.ID).Scan(&pipeline); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"repo", "image"} {
		if _, err := conn.Exec(ctx, `INSERT INTO resources (pipeline_id, name, type, config, config_hash) VALUES ($1, $2, 'mock', '{}', 'h')`, pipeline, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.QueryRow(ctx, `INSERT INTO jobs (pipeline_id, name, config) VALUES ($1, 'unit', '{}') RETURNING id`, pipeline).Scan(&jobID); err != nil {
		t.Fatal(err)
	}
	repo, err := d.LookupResource(ctx, team.ID, "p", "repo")
	if err != nil {
		t.Fatal(err)
	}

	check, err := d.CreateCheckBuild(ctx, repo, []byte(`{"id":"c"}`), "s1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The check of a resource type's image in the same build saves nothing.
	err = s.recordCheck(ctx, &buildstate.Build{ID: check.ID}, &concourse.CheckPlan{Name: "my-type"}, []buildstate.Version{{Version: map[string]string{"digest": "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	err = s.recordCheck(ctx, &buildstate.Build{ID: check.ID}, &concourse.CheckPlan{Name: "repo", Resource: "repo"}, []buildstate.Version{
		{Version: map[string]string{"ref": "a"}},
		{Version: map[string]string{"ref": "b"}, Metadata: []concourse.MetadataField{{Name: "author", Value: "me"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	vs, _, _, err := d.Versions(ctx, repo.ID, db.VersionPage{})
	if err != nil || len(vs) != 2 || vs[0].Version["ref"] != "b" || vs[0].Metadata[0].Value != "me" {
		t.Fatalf("versions %+v, %v", vs, err)
	}

	job, err := d.CreateJobBuild(ctx, jobID, "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	jb := &buildstate.Build{ID: job.ID}
	if err := s.recordBuildVersion(ctx, jb, "src", "repo", buildstate.Version{Version: map[string]string{"ref": "a"}}, true); err != nil {
		t.Fatal(err)
	}
	if err := s.recordBuildVersion(ctx, jb, "image", "image", buildstate.Version{Version: map[string]string{"digest": "sha256:1"}}, false); err != nil {
		t.Fatal(err)
	}
	got, err := d.BuildVersions(ctx, job.ID)
	if err != nil || len(got) != 2 {
		t.Fatalf("build versions %+v, %v", got, err)
	}
	if !got[0].Input || got[0].Name != "src" || got[0].Version.Version["ref"] != "a" || !got[0].FirstOccurrence ||
		got[1].Input || got[1].ResourceName != "image" || got[1].Version.Version["digest"] != "sha256:1" {
		t.Fatalf("build versions %+v", got)
	}
	if err := s.recordBuildVersion(ctx, jb, "image", "", buildstate.Version{Version: map[string]string{"digest": "sha256:2"}}, true); err != nil {
		t.Fatalf("an image's get in a job build: %v", err)
	}
	if err := s.recordBuildVersion(ctx, jb, "src", "nope", buildstate.Version{Version: map[string]string{"ref": "a"}}, true); err == nil {
		t.Fatal("a version of an unknown resource was recorded")
	}

	oneOff, err := d.CreateOneOffBuild(ctx, team.ID, []byte(`{"id":"x"}`), "", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.recordCheck(ctx, &buildstate.Build{ID: oneOff.ID}, &concourse.CheckPlan{Name: "repo", Resource: "repo"}, []buildstate.Version{{Version: map[string]string{"ref": "z"}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.recordBuildVersion(ctx, &buildstate.Build{ID: oneOff.ID}, "src", "repo", buildstate.Version{Version: map[string]string{"ref": "z"}}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.FindVersion(ctx, repo.ID, map[string]string{"ref": "z"}); err == nil {
		t.Fatal("a one-off build's check saved a version")
	}
}

// wakeCounter is an Engine that only counts the scheduler's wake-ups.
type wakeCounter struct {
	Engine
	wakes int
}

func (w *wakeCounter) WakeScheduler() { w.wakes++ }
