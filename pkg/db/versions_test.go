package db

import (
	"errors"
	"maps"
	"math"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
)

// pipelineFixture is a pipeline with resources and jobs inserted directly
// (saving pipelines is another file's business).
type pipelineFixture struct {
	teamID     int
	pipelineID int64
	resources  map[string]int64
	jobs       map[string]int64
}

func newPipelineFixture(t *testing.T, d *DB, resources, jobs []string) pipelineFixture {
	t.Helper()
	ctx := t.Context()
	team, err := d.EnsureTeam(ctx, "main", nil)
	if err != nil {
		t.Fatal(err)
	}
	f := pipelineFixture{teamID: team.ID, resources: map[string]int64{}, jobs: map[string]int64{}}
	if err := d.pool.QueryRow(ctx, `INSERT INTO pipelines (team_id, name, config) VALUES ($1, 'p', '{}') RETURNING id`, team.ID).Scan(&f.pipelineID); err != nil {
		t.Fatal(err)
	}
	for _, r := range resources {
		var id int64
		if err := d.pool.QueryRow(ctx, `INSERT INTO resources (pipeline_id, name, type, config, config_hash)
			VALUES ($1, $2, 'mock', '{}', 'hash-1') RETURNING id`, f.pipelineID, r).Scan(&id); err != nil {
			t.Fatal(err)
		}
		f.resources[r] = id
	}
	for _, j := range jobs {
		var id int64
		if err := d.pool.QueryRow(ctx, `INSERT INTO jobs (pipeline_id, name, config) VALUES ($1, $2, '{}') RETURNING id`, f.pipelineID, j).Scan(&id); err != nil {
			t.Fatal(err)
		}
		f.jobs[j] = id
	}
	return f
}

func vs(refs ...string) []NewVersion {
	out := make([]NewVersion, len(refs))
	for i, r := range refs {
		out[i] = NewVersion{Version: map[string]string{"ref": r}}
	}
	return out
}

func refs(t *testing.T, versions []Version) []string {
	t.Helper()
	out := make([]string, len(versions))
	for i, v := range versions {
		out[i] = v.Version["ref"]
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSaveVersionsOrdersDedupsAndKeepsIDs(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	f := newPipelineFixture(t, d, []string{"repo"}, nil)
	r := f.resources["repo"]

	n, err := d.SaveVersions(ctx, r, []NewVersion{
		{Version: map[string]string{"ref": "a"}, Metadata: []concourse.MetadataField{{Name: "author", Value: "x"}}},
		{Version: map[string]string{"ref": "b"}},
	})
	if err != nil || n != 2 {
		t.Fatalf("save: %d, %v", n, err)
	}
	all, _, _, err := d.Versions(ctx, r, VersionPage{})
	if err != nil {
		t.Fatal(err)
	}
	if got := refs(t, all); !equal(got, []string{"b", "a"}) {
		t.Fatalf("versions %v, want newest first [b a]", got)
	}
	if all[1].Metadata[0].Value != "x" || !all[0].Enabled {
		t.Fatalf("version a: %+v", all[1])
	}
	aID := all[1].ID

	// A check from b reports b again, then c: b is already newest, c is new.
	if n, err = d.SaveVersions(ctx, r, vs("b", "c")); err != nil || n != 1 {
		t.Fatalf("second save: %d, %v", n, err)
	}
	// Nothing new: nothing changed.
	if n, err = d.SaveVersions(ctx, r, vs("c")); err != nil || n != 0 {
		t.Fatalf("third save: %d, %v", n, err)
	}
	// An old version reported last becomes the newest, keeping its id
	// and its metadata (an empty report does not erase it).
	if n, err = d.SaveVersions(ctx, r, vs("a")); err != nil || n != 1 {
		t.Fatalf("fourth save: %d, %v", n, err)
	}
	all, _, _, _ = d.Versions(ctx, r, VersionPage{})
	if got := refs(t, all); !equal(got, []string{"a", "c", "b"}) {
		t.Fatalf("versions %v, want [a c b]", got)
	}
	if all[0].ID != aID || len(all[0].Metadata) != 1 {
		t.Fatalf("a changed: %+v (id was %d)", all[0], aID)
	}
	latest, err := d.LatestVersion(ctx, r)
	if err != nil || latest.Version["ref"] != "a" {
		t.Fatalf("latest %+v, %v", latest, err)
	}

	// A new source (config hash) starts from no versions.
	if _, err := d.pool.Exec(ctx, "UPDATE resources SET config_hash = 'hash-2' WHERE id = $1", r); err != nil {
		t.Fatal(err)
	}
	if _, err := d.LatestVersion(ctx, r); !errors.Is(err, ErrNotFound) {
		t.Fatalf("latest after a new source: %v, want ErrNotFound", err)
	}
	if n, err = d.SaveVersions(ctx, r, vs("a")); err != nil || n != 1 {
		t.Fatalf("save under the new source: %d, %v", n, err)
	}
	v, err := d.FindVersion(ctx, r, map[string]string{"ref": "a"})
	if err != nil || v.ID == aID {
		t.Fatalf("a under the new source: %+v, %v (old id %d)", v, err, aID)
	}

	if _, err := d.SaveVersions(ctx, r, []NewVersion{{}}); err == nil {
		t.Fatal("a null version was saved")
	}
}

func TestVersionPagesAndFilter(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	f := newPipelineFixture(t, d, []string{"repo"}, nil)
	r := f.resources["repo"]
	if _, err := d.SaveVersions(ctx, r, vs("1", "2", "3", "4", "5")); err != nil {
		t.Fatal(err)
	}
	page, older, newer, err := d.Versions(ctx, r, VersionPage{Limit: 2})
	if err != nil || !equal(refs(t, page), []string{"5", "4"}) || !older || newer {
		t.Fatalf("first page %v older=%v newer=%v err=%v", refs(t, page), older, newer, err)
	}
	// The next page: to = the version after the last one shown.
	all, _, _, _ := d.Versions(ctx, r, VersionPage{})
	page, older, newer, _ = d.Versions(ctx, r, VersionPage{Limit: 2, To: all[2].ID})
	if !equal(refs(t, page), []string{"3", "2"}) || !older || !newer {
		t.Fatalf("second page %v older=%v newer=%v", refs(t, page), older, newer)
	}
	page, _, _, _ = d.Versions(ctx, r, VersionPage{Limit: 2, From: all[2].ID})
	if !equal(refs(t, page), []string{"4", "3"}) {
		t.Fatalf("page from 3: %v", refs(t, page))
	}
	page, _, _, _ = d.Versions(ctx, r, VersionPage{Filter: map[string]string{"ref": "2"}})
	if !equal(refs(t, page), []string{"2"}) {
		t.Fatalf("filtered: %v", refs(t, page))
	}
	// The largest limit is every version, not a negative LIMIT (the API
	// answered 500 for limit=MaxInt64).
	page, older, _, err = d.Versions(ctx, r, VersionPage{Limit: math.MaxInt})
	if err != nil || len(page) != 5 || older {
		t.Fatalf("limit MaxInt: %v older=%v err=%v", refs(t, page), older, err)
	}
}

func TestPinEnableAndCheckBookkeeping(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	f := newPipelineFixture(t, d, []string{"repo", "other"}, nil)
	r := f.resources["repo"]
	if _, err := d.SaveVersions(ctx, r, vs("a", "b")); err != nil {
		t.Fatal(err)
	}
	a, _ := d.FindVersion(ctx, r, map[string]string{"ref": "a"})

	if err := d.SetPinComment(ctx, r, "why"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("comment on an unpinned resource: %v", err)
	}
	if err := d.PinVersion(ctx, f.resources["other"], a.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("pin to another resource's version: %v", err)
	}
	if err := d.PinVersion(ctx, r, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := d.SetPinComment(ctx, r, "broken b"); err != nil {
		t.Fatal(err)
	}
	ref, err := d.LookupResource(ctx, f.teamID, "p", "repo")
	if err != nil || !maps.Equal(ref.APIPinnedVersion, map[string]string{"ref": "a"}) || ref.PinComment != "broken b" {
		t.Fatalf("pinned resource %+v, %v", ref, err)
	}
	if err := d.UnpinResource(ctx, r); err != nil {
		t.Fatal(err)
	}
	if ref, _ = d.ResourceByID(ctx, r); ref.APIPinnedVersion != nil || ref.PinComment != "" {
		t.Fatalf("unpinned resource %+v", ref)
	}

	b, _ := d.FindVersion(ctx, r, map[string]string{"ref": "b"})
	if err := d.SetVersionEnabled(ctx, r, b.ID, false); err != nil {
		t.Fatal(err)
	}
	if latest, _ := d.LatestVersion(ctx, r); latest.ID != a.ID {
		t.Fatalf("latest enabled %+v, want a", latest)
	}
	if en, _ := d.EnabledVersions(ctx, r); len(en) != 1 {
		t.Fatalf("enabled versions %+v", en)
	}
	if err := d.SetVersionEnabled(ctx, f.resources["other"], b.ID, true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("enable through another resource: %v", err)
	}

	// Checks: due ones are listed until a check build runs; a running
	// check keeps the resource off the list; a request puts it back.
	now := time.Now()
	due, err := d.ResourcesToCheck(ctx, now.Add(time.Second))
	if err != nil || len(due) != 2 {
		t.Fatalf("due: %d, %v", len(due), err)
	}
	ref, _ = d.ResourceByID(ctx, r)
	cb, err := d.CreateCheckBuild(ctx, ref, []byte(`{"id":"c"}`), "s1", now)
	if err != nil || cb.Name != "check" || cb.ResourceName != "repo" || cb.Status != concourse.StatusStarted {
		t.Fatalf("check build %+v, %v", cb, err)
	}
	if err := d.CheckStarted(ctx, r, cb.ID, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := d.RequestCheck(ctx, r, map[string]string{"ref": "a"}); err != nil {
		t.Fatal(err)
	}
	due, _ = d.ResourcesToCheck(ctx, now.Add(time.Second))
	if len(due) != 1 || due[0].Name != "other" {
		t.Fatalf("due while repo's check runs: %+v", due)
	}
	if err := d.FinishBuild(ctx, cb.ID, concourse.StatusErrored, now); err != nil {
		t.Fatal(err)
	}
	if err := d.CheckFinished(ctx, r, now, "boom"); err != nil {
		t.Fatal(err)
	}
	due, _ = d.ResourcesToCheck(ctx, now.Add(time.Second))
	if len(due) != 2 {
		t.Fatalf("a requested check is due: %+v", due)
	}
	for _, x := range due {
		if x.Name == "repo" && (!x.CheckRequested || x.CheckFromVersion["ref"] != "a" || x.CheckError != "boom") {
			t.Fatalf("repo %+v", x)
		}
	}
}
