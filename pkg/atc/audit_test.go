package atc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/atc/buildlog/buildlogtest"
	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/test/testenv"
)

// Job builds of different pipelines share names ("1"): their audit
// records are kept apart by build id.
func TestBuildAuditIsKeyedByID(t *testing.T) {
	store := testenv.MinIOStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &Server{store: store, log: slog.New(slog.DiscardHandler)}
	for _, b := range []*buildstate.Build{
		{ID: 41, Name: "1", Team: "main", Pipeline: "a", Job: "j"},
		{ID: 42, Name: "1", Team: "main", Pipeline: "b", Job: "j"},
	} {
		s.writeBuildAudit(ctx, b, concourse.StatusSucceeded, time.Now())
	}
	for _, id := range []int64{41, 42} {
		rc, _, err := store.Get(ctx, blobstore.BuildPrefix(fmt.Sprint(id))+"build.json")
		if err != nil {
			t.Fatalf("build %d: %v", id, err)
		}
		body, _ := io.ReadAll(rc)
		rc.Close()
		var rec auditBuild
		if err := json.Unmarshal(body, &rec); err != nil || rec.ID != id {
			t.Errorf("builds/%d/build.json is %s (%v)", id, body, err)
		}
	}
}

// build.json shows the credentials the build read as ((redacted)), like
// its events: a step's error may quote what the step printed.
func TestBuildAuditRedactsCredentials(t *testing.T) {
	store := testenv.MinIOStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &Server{store: store, log: slog.New(slog.DiscardHandler)}
	b := &buildstate.Build{ID: 43, Name: "1", Team: "main", Log: buildlogtest.Logs(t, nil).Open(43)}
	b.State.Steps = map[concourse.PlanID]*buildstate.StepRecord{"p1": {Error: "login as s3cret-user failed"}}
	b.Log.Redact([]string{"s3cret-user"})
	s.writeBuildAudit(ctx, b, concourse.StatusErrored, time.Now())
	rc, _, err := store.Get(ctx, blobstore.BuildPrefix("43")+"build.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(rc)
	rc.Close()
	if strings.Contains(string(body), "s3cret-user") || !strings.Contains(string(body), "login as ((redacted)) failed") {
		t.Errorf("build.json = %s, want the credential redacted", body)
	}
}

// A build given the ID of an earlier one (its database reset or restored)
// writes its own build.json: the records are write-once, and the key has
// each build's creation time in it.
func TestBuildAuditOfAReusedID(t *testing.T) {
	store := testenv.MinIOStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &Server{store: store, log: slog.New(slog.DiscardHandler)}
	first := time.Date(2026, 11, 27, 10, 0, 0, 123456000, time.UTC)
	builds := []*buildstate.Build{
		{ID: 44, Name: "44", Team: "main", Created: first},
		{ID: 44, Name: "44", Team: "other", Created: first.Add(time.Hour)},
	}
	for _, b := range builds {
		s.writeBuildAudit(ctx, b, concourse.StatusSucceeded, time.Now())
	}
	if got := builds[0].AuditID(); got != "44-20261127T100000.123456Z" {
		t.Errorf("audit id %q", got)
	}
	for _, b := range builds {
		rc, _, err := store.Get(ctx, blobstore.BuildPrefix(b.AuditID())+"build.json")
		if err != nil {
			t.Fatalf("build created %s: %v", b.Created, err)
		}
		body, _ := io.ReadAll(rc)
		rc.Close()
		var rec auditBuild
		if err := json.Unmarshal(body, &rec); err != nil || rec.Team != b.Team {
			t.Errorf("%sbuild.json is %s (%v), want team %s's", blobstore.BuildPrefix(b.AuditID()), body, err, b.Team)
		}
	}
}
