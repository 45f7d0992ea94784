package db

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
)

// The GC queries against the real PostgreSQL: what counts as a reference.
func TestGCArtifactReferences(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, err := d.EnsureTeam(ctx, "main", TeamAuth{})
	if err != nil {
		t.Fatal(err)
	}
	upload, err := d.CreateArtifact(ctx, Artifact{TeamID: team.ID, Key: "artifacts/upload.tar.zst", Size: 10})
	if err != nil {
		t.Fatal(err)
	}
	// A running build takes the upload as an input.
	plan := fmt.Sprintf(`{"id":"1","do":[{"id":"2","artifact_input":{"artifact_id":%d,"name":"in"}}]}`, upload.ID)
	running, err := d.CreateOneOffBuild(ctx, team.ID, json.RawMessage(plan), "test", "s")
	if err != nil {
		t.Fatal(err)
	}
	// A build that finished an hour ago with a step output and a kept output.
	ended := time.Now().Add(-time.Hour)
	finished, err := d.CreateOneOffBuild(ctx, team.ID, json.RawMessage(`{"id":"1"}`), "test", "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SaveBuildState(ctx, finished.ID, json.RawMessage(`{"steps":{"3":{"outputs":{"out":{"key":"artifacts/step.tar.zst"}}}}}`)); err != nil {
		t.Fatal(err)
	}
	kept, err := d.CreateArtifact(ctx, Artifact{TeamID: team.ID, BuildID: finished.ID, Key: "artifacts/kept.tar.zst"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.FinishBuild(ctx, finished.ID, concourse.StatusSucceeded, ended); err != nil {
		t.Fatal(err)
	}
	if err := d.SaveResourceCache(ctx, ResourceCache{Key: "c", TeamID: team.ID, Artifact: "artifacts/cache.tar.zst", Version: map[string]string{"v": "1"}}); err != nil {
		t.Fatal(err)
	}

	// Within the retention (cutoff before the end), nothing is expired and
	// the finished build's step output is referenced.
	early := ended.Add(-time.Minute)
	if as, err := d.ExpiredArtifacts(ctx, early); err != nil || len(as) != 0 {
		t.Fatalf("expired before the retention: %+v %v", as, err)
	}
	refs, err := d.ReferencedArtifactKeys(ctx, early)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"artifacts/upload.tar.zst", "artifacts/kept.tar.zst", "artifacts/step.tar.zst", "artifacts/cache.tar.zst"} {
		if !refs[k] {
			t.Errorf("%s not referenced within the retention: %v", k, refs)
		}
	}

	// Past the retention both records are candidates, but the running
	// build's input stays.
	late := time.Now().Add(time.Minute)
	as, err := d.ExpiredArtifacts(ctx, late)
	if err != nil || len(as) != 2 {
		t.Fatalf("expired past the retention: %+v %v", as, err)
	}
	if deleted, _, err := d.DeleteExpiredArtifact(ctx, upload.ID, late); err != nil || deleted {
		t.Fatalf("deleted the input of a running build: %v %v", deleted, err)
	}
	deleted, referenced, err := d.DeleteExpiredArtifact(ctx, kept.ID, late)
	if err != nil || !deleted || referenced {
		t.Fatalf("kept output: deleted %v, key still referenced %v, %v", deleted, referenced, err)
	}
	if ok, err := d.ArtifactKeyReferenced(ctx, "artifacts/step.tar.zst", late); err != nil || ok {
		t.Fatalf("a long-finished build's step output is still referenced: %v %v", ok, err)
	}
	if ok, err := d.ArtifactKeyReferenced(ctx, "artifacts/cache.tar.zst", late); err != nil || !ok {
		t.Fatalf("a cached artifact is not referenced: %v %v", ok, err)
	}

	// The build using it ends: the upload stays for the retention after
	// that end, as the build's outputs do, then goes.
	end := late.Add(time.Minute)
	if err := d.FinishBuild(ctx, running.ID, concourse.StatusSucceeded, end); err != nil {
		t.Fatal(err)
	}
	if deleted, _, err := d.DeleteExpiredArtifact(ctx, upload.ID, late); err != nil || deleted {
		t.Fatalf("upload of a build that ended within the retention: deleted %v %v", deleted, err)
	}
	if deleted, _, err := d.DeleteExpiredArtifact(ctx, upload.ID, end.Add(time.Second)); err != nil || !deleted {
		t.Fatalf("upload of a build that ended past the retention: deleted %v %v", deleted, err)
	}
}

func TestGCExpiredContainers(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, err := d.EnsureTeam(ctx, "main", TeamAuth{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.CreateOneOffBuild(ctx, team.ID, json.RawMessage(`{"id":"1"}`), "test", "s")
	if err != nil {
		t.Fatal(err)
	}
	mine, err := d.CreateContainer(ctx, Container{TeamID: team.ID, BuildID: b.ID, Type: "task", WorkerName: "w", PodName: "porter-a", StepID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateContainer(ctx, Container{TeamID: team.ID, BuildID: b.ID, Type: "task", WorkerName: "other", PodName: "porter-b", StepID: "b"}); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if cs, err := d.ExpiredContainers(ctx, "w", later); err != nil || len(cs) != 0 {
		t.Fatalf("containers of a running build: %+v %v", cs, err)
	}
	end := time.Now()
	if err := d.FinishBuild(ctx, b.ID, concourse.StatusFailed, end); err != nil {
		t.Fatal(err)
	}
	if cs, err := d.ExpiredContainers(ctx, "w", end.Add(-time.Second)); err != nil || len(cs) != 0 {
		t.Fatalf("containers within the retention: %+v %v", cs, err)
	}
	cs, err := d.ExpiredContainers(ctx, "w", later)
	if err != nil || len(cs) != 1 || cs[0].Handle != mine.Handle {
		t.Fatalf("containers of worker w past the retention: %+v %v", cs, err)
	}
}

func TestGCResourceCaches(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, err := d.EnsureTeam(ctx, "main", TeamAuth{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig([]string{"j"}, map[string]map[string]any{"cfgpin": {"n": 1}, "apipin": {"n": 2}})
	cfg.Resources[1].Version = map[string]string{"ref": "pinned"} // "cfgpin" (sorted after "apipin")
	p, _, err := d.SavePipeline(ctx, team.ID, "p", cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfgpin, err := d.Resource(ctx, p.ID, "cfgpin")
	if err != nil {
		t.Fatal(err)
	}
	apipin, err := d.Resource(ctx, p.ID, "apipin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.pool.Exec(ctx, `UPDATE resources SET api_pinned_version = '{"ref":"api"}' WHERE id = $1`, apipin.ID); err != nil {
		t.Fatal(err)
	}
	save := func(key string, resourceID int64, ref string) {
		t.Helper()
		if err := d.SaveResourceCache(ctx, ResourceCache{Key: key, TeamID: team.ID, ResourceID: resourceID,
			Artifact: "artifacts/" + key + ".tar.zst", Version: map[string]string{"ref": ref}}); err != nil {
			t.Fatal(err)
		}
	}
	save("cfg-pinned", cfgpin.ID, "pinned")
	save("cfg-other", cfgpin.ID, "other")
	save("api-pinned", apipin.ID, "api")
	save("api-other", apipin.ID, "other")
	save("one-off", 0, "x")
	save("in-use", 0, "y")
	running, err := d.CreateOneOffBuild(ctx, team.ID, json.RawMessage(`{"id":"1"}`), "test", "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SaveBuildState(ctx, running.ID, json.RawMessage(`{"steps":{"2":{"cache_key":"in-use"}}}`)); err != nil {
		t.Fatal(err)
	}

	if n, err := d.DeleteExpiredResourceCaches(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("caches used within the retention: deleted %d %v", n, err)
	}
	n, err := d.DeleteExpiredResourceCaches(ctx, time.Now().Add(time.Hour))
	if err != nil || n != 3 {
		t.Fatalf("deleted %d, want 3 (cfg-other, api-other, one-off): %v", n, err)
	}
	for _, key := range []string{"cfg-pinned", "api-pinned", "in-use"} {
		if _, err := d.ResourceCache(ctx, key); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}
	for _, key := range []string{"cfg-other", "api-other", "one-off"} {
		if _, err := d.ResourceCache(ctx, key); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s still there: %v", key, err)
		}
	}
}

// Build log objects are noted when their last index row goes, and only
// then: a segment shared with a build that still exists stays.
func TestGCBuildLogObjects(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	team, err := d.EnsureTeam(ctx, "main", TeamAuth{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := d.CreateOneOffBuild(ctx, team.ID, nil, "test", "s")
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.CreateOneOffBuild(ctx, team.ID, nil, "test", "s")
	if err != nil {
		t.Fatal(err)
	}
	chunk := func(build int64, first, last uint64, key string) BuildEventChunk {
		return BuildEventChunk{BuildID: build, EventChunk: EventChunk{FirstID: first, LastID: last, Key: key, Offset: 0, Length: 10}}
	}
	shared, onlyA, retry := "atc/segments/1-shared.zst", "atc/segments/2-only-a.zst", "atc/segments/3-retry.zst"
	if err := d.AddEventSegment(ctx, []BuildEventChunk{chunk(a.ID, 1, 10, shared), chunk(b.ID, 1, 5, shared)}); err != nil {
		t.Fatal(err)
	}
	if err := d.AddEventSegment(ctx, []BuildEventChunk{chunk(a.ID, 11, 20, onlyA)}); err != nil {
		t.Fatal(err)
	}
	unreferenced := func(want ...string) {
		t.Helper()
		got, err := d.UnreferencedEventObjects(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("unreferenced build log objects %v, want %v", got, want)
		}
	}
	unreferenced()

	// A build goes (as with its pipeline): its own segment is unreferenced,
	// the one it shares with b is not.
	if _, err := d.pool.Exec(ctx, "DELETE FROM builds WHERE id = $1", a.ID); err != nil {
		t.Fatal(err)
	}
	unreferenced(onlyA)
	if err := d.ForgetEventObject(ctx, onlyA); err != nil {
		t.Fatal(err)
	}
	unreferenced()

	// A retried chunk moves to another segment: the old one is now unnamed.
	if err := d.AddEventSegment(ctx, []BuildEventChunk{chunk(b.ID, 1, 5, retry)}); err != nil {
		t.Fatal(err)
	}
	unreferenced(shared)
	if chunks, err := d.EventChunks(ctx, b.ID); err != nil || len(chunks) != 1 || chunks[0].Key != retry {
		t.Fatalf("b's chunks after the retry: %+v %v", chunks, err)
	}

	// The last build goes.
	if _, err := d.pool.Exec(ctx, "DELETE FROM builds WHERE id = $1", b.ID); err != nil {
		t.Fatal(err)
	}
	unreferenced(shared, retry)
}
