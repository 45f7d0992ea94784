package db

import (
	"errors"
	"testing"
)

func TestResourceCaches(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, err := d.EnsureTeam(ctx, "main", TeamAuth{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := ResourceCacheKey(team.ID, "git", "img@sha256:1", map[string]any{"uri": "x"}, nil, map[string]string{"ref": "abc"})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := ResourceCacheKey(team.ID, "git", "img@sha256:1", map[string]any{"uri": "x"}, nil, map[string]string{"ref": "abc"})
	other, _ := ResourceCacheKey(team.ID, "git", "img@sha256:1", map[string]any{"uri": "x"}, nil, map[string]string{"ref": "def"})
	if key != again || key == other {
		t.Fatalf("keys: %s %s %s: equal inputs must give equal keys, other versions others", key, again, other)
	}
	if _, err := d.ResourceCache(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ResourceCache before saving: %v, want ErrNotFound", err)
	}

	var pipelineID, resourceID int64
	if err := d.pool.QueryRow(ctx, `INSERT INTO pipelines (team_id, name, config) VALUES ($1, 'p', '{}') RETURNING id`, team.ID).Scan(&pipelineID); err != nil {
		t.Fatal(err)
	}
	if err := d.pool.QueryRow(ctx, `INSERT INTO resources (pipeline_id, name, type, config, config_hash) VALUES ($1, 'repo', 'git', '{}', 'h') RETURNING id`, pipelineID).Scan(&resourceID); err != nil {
		t.Fatal(err)
	}
	want := ResourceCache{Key: key, TeamID: team.ID, ResourceID: resourceID, Artifact: "artifacts/a.tar.zst", Digest: "sha256:aa", Size: 12,
		Version: map[string]string{"ref": "abc"}, Metadata: []byte(`[{"name":"author","value":"me"}]`)}
	if err := d.SaveResourceCache(ctx, want); err != nil {
		t.Fatal(err)
	}
	// A one-off build's get of the same version keeps the resource.
	oneOff := want
	oneOff.ResourceID = 0
	if err := d.SaveResourceCache(ctx, oneOff); err != nil {
		t.Fatal(err)
	}
	got, err := d.ResourceCache(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got.Artifact != want.Artifact || got.Digest != want.Digest || got.Size != 12 || got.ResourceID != resourceID ||
		got.Version["ref"] != "abc" || string(got.Metadata) != `[{"name": "author", "value": "me"}]` {
		t.Fatalf("got %+v (metadata %s), want %+v", got, got.Metadata, want)
	}

	n, err := d.DeleteResourceCaches(ctx, resourceID)
	if err != nil || n != 1 {
		t.Fatalf("DeleteResourceCaches = %d, %v; want 1", n, err)
	}
	if _, err := d.ResourceCache(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ResourceCache after clearing: %v, want ErrNotFound", err)
	}
	if id, err := d.BuildResourceID(ctx, 12345, "repo"); err != nil || id != 0 {
		t.Fatalf("BuildResourceID of a missing build = %d, %v; want 0", id, err)
	}
}

// fly volumes lists a team's caches with the resource each was fetched
// for; another team's are not among them.
func TestTeamResourceCaches(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	main, err := d.EnsureTeam(ctx, "main", TeamAuth{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := d.EnsureTeam(ctx, "other", TeamAuth{})
	if err != nil {
		t.Fatal(err)
	}
	var pipelineID, resourceID int64
	if err := d.pool.QueryRow(ctx, `INSERT INTO pipelines (team_id, name, config, instance_vars) VALUES ($1, 'p', '{}', '{"branch":"x"}') RETURNING id`,
		main.ID).Scan(&pipelineID); err != nil {
		t.Fatal(err)
	}
	if err := d.pool.QueryRow(ctx, `INSERT INTO resources (pipeline_id, name, type, config, config_hash) VALUES ($1, 'repo', 'git', '{}', 'h') RETURNING id`,
		pipelineID).Scan(&resourceID); err != nil {
		t.Fatal(err)
	}
	for _, c := range []ResourceCache{
		{Key: "k1", TeamID: main.ID, ResourceID: resourceID, Artifact: "artifacts/main/a.json", Digest: "sha256:aa", Size: 1, Version: map[string]string{"ref": "abc"}},
		{Key: "k2", TeamID: main.ID, Artifact: "artifacts/main/b.json", Digest: "sha256:bb", Version: map[string]string{"digest": "sha256:cc"}},
		{Key: "k3", TeamID: other.ID, Artifact: "artifacts/other/c.json", Digest: "sha256:dd", Version: map[string]string{"v": "1"}},
	} {
		if err := d.SaveResourceCache(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := d.TeamResourceCaches(ctx, main.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 {
		t.Fatalf("caches of main: %+v, want k1 and k2", cs)
	}
	byKey := map[string]TeamResourceCache{cs[0].Key: cs[0], cs[1].Key: cs[1]}
	k1, k2 := byKey["k1"], byKey["k2"]
	if k1.ResourceID != resourceID || k1.ResourceName != "repo" || k1.ResourceType != "git" || k1.PipelineID != pipelineID ||
		k1.PipelineName != "p" || k1.InstanceVars["branch"] != "x" || k1.Version["ref"] != "abc" || k1.Artifact != "artifacts/main/a.json" || k1.CreateTime.IsZero() {
		t.Errorf("k1 = %+v", k1)
	}
	if k2.ResourceID != 0 || k2.ResourceName != "" || k2.PipelineName != "" || k2.InstanceVars != nil || k2.Version["digest"] != "sha256:cc" {
		t.Errorf("k2 (a one-off get's) = %+v", k2)
	}
	if cs, err := d.TeamResourceCaches(ctx, other.ID); err != nil || len(cs) != 1 || cs[0].Key != "k3" {
		t.Errorf("caches of other: %+v, %v; want k3", cs, err)
	}
}
