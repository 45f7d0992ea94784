package planvalidate

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/worker"
)

func TestPlan(t *testing.T) {
	team := db.Team{ID: 1, Name: "main"}
	placement := func(req worker.Requirements) error {
		if len(req.Tags) > 0 {
			return errors.New("no worker has tags " + strings.Join(req.Tags, ","))
		}
		return nil
	}
	artifacts := func(_ context.Context, id int64) (db.Artifact, error) {
		switch id {
		case 1:
			return db.Artifact{ID: 1, TeamID: 1}, nil
		case 2:
			return db.Artifact{ID: 2, TeamID: 2}, nil
		}
		return db.Artifact{}, db.ErrNotFound
	}
	task := `{"task":{"name":"t","config":{"platform":"linux","image_resource":{"type":"registry-image","source":{"repository":"busybox"}},"run":{"path":"true"}}}}`
	for _, tc := range []struct {
		plan, wantErr string
	}{
		{`{"id":"1","do":[{"id":"2","artifact_input":{"artifact_id":1,"name":"in"}},` + task[:1] + `"id":"3",` + task[1:] + `]}`, ""},
		{`{"id":"1","run":{"message":"m"}}`, "run steps (Concourse's prototypes) are not supported"},
		{`{"id":"1"}`, "no kind this server knows"},
		{`{"id":"1","artifact_input":{"artifact_id":2,"name":"in"}}`, `artifact 2 does not exist in team "main"`},
		{`{"id":"1","do":[{"id":"2","timeout":{"duration":"-1s","step":{"id":"2"}}}]}`, "plan id \"2\" is used twice"},
		{`{"id":"1","task":{"name":"t","tags":["gpu"],"config":{"platform":"linux","image_resource":{"type":"registry-image","source":{"repository":"busybox"}},"run":{"path":"true"}}}}`, "no worker has tags gpu"},
	} {
		var p concourse.Plan
		if err := json.Unmarshal([]byte(tc.plan), &p); err != nil {
			t.Fatal(err)
		}
		err := Plan(t.Context(), placement, artifacts, team, &p)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.plan, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: err %v, want one saying %q", tc.plan, err, tc.wantErr)
		case err != nil:
			var br interface{ BadRequest() bool }
			if !errors.As(err, &br) || !br.BadRequest() {
				t.Errorf("%s: %v is not a bad request", tc.plan, err)
			}
		}
	}
}
