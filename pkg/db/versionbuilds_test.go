package db

import (
	"reflect"
	"testing"

	"github.com/porter-ci/porter/pkg/concourse"
)

// A get's metadata becomes the checked version's, which had none.
func TestGetMetadataIsTheVersions(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	f := newPipelineFixture(t, d, []string{"repo"}, []string{"unit"})
	repo, unit := f.resources["repo"], f.jobs["unit"]
	if _, err := d.SaveVersions(ctx, repo, vs("a")); err != nil {
		t.Fatal(err)
	}
	a, _ := d.FindVersion(ctx, repo, map[string]string{"ref": "a"})
	b1, err := d.CreateJobBuild(ctx, unit, "", false, []BuildInput{{Name: "src", ResourceID: repo, VersionID: a.ID}})
	if err != nil {
		t.Fatal(err)
	}
	md := []concourse.MetadataField{{Name: "commit", Value: "abc123"}}
	if err := d.SaveBuildVersion(ctx, b1.ID, unit, "src", repo, NewVersion{Version: map[string]string{"ref": "a"}, Metadata: md}, true); err != nil {
		t.Fatal(err)
	}
	got, err := d.FindVersion(ctx, repo, map[string]string{"ref": "a"})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != a.ID || !reflect.DeepEqual(got.Metadata, md) {
		t.Fatalf("version after the get: %+v, want id %d with %v", got, a.ID, md)
	}
}

// TestVersionBuilds: a version's input_to and output_of builds, newest
// first, and nothing of another version or direction.
func TestVersionBuilds(t *testing.T) {
	d, _ := openTest(t)
	ctx := t.Context()
	f := newPipelineFixture(t, d, []string{"repo", "image"}, []string{"unit", "deploy"})
	repo, image, unit, deploy := f.resources["repo"], f.resources["image"], f.jobs["unit"], f.jobs["deploy"]
	if _, err := d.SaveVersions(ctx, repo, vs("a", "b")); err != nil {
		t.Fatal(err)
	}
	a, _ := d.FindVersion(ctx, repo, map[string]string{"ref": "a"})
	b, _ := d.FindVersion(ctx, repo, map[string]string{"ref": "b"})
	b1, err := d.CreateJobBuild(ctx, unit, "", false, []BuildInput{{Name: "src", ResourceID: repo, VersionID: a.ID}})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := d.CreateJobBuild(ctx, deploy, "", false, []BuildInput{{Name: "src", ResourceID: repo, VersionID: a.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateJobBuild(ctx, unit, "", false, []BuildInput{{Name: "src", ResourceID: repo, VersionID: b.ID}}); err != nil {
		t.Fatal(err)
	}
	if err := d.SaveBuildVersion(ctx, b1.ID, unit, "image", image, NewVersion{Version: map[string]string{"digest": "sha256:1"}}, false); err != nil {
		t.Fatal(err)
	}
	img, err := d.FindVersion(ctx, image, map[string]string{"digest": "sha256:1"})
	if err != nil {
		t.Fatal(err)
	}
	ids := func(resource, version int64, input bool) []int64 {
		t.Helper()
		bs, err := d.VersionBuilds(ctx, resource, version, input)
		if err != nil {
			t.Fatal(err)
		}
		out := []int64{}
		for _, b := range bs {
			if b.JobName == "" || b.PipelineName == "" {
				t.Errorf("build %d without its job and pipeline: %+v", b.ID, b)
			}
			out = append(out, b.ID)
		}
		return out
	}
	for _, c := range []struct {
		name              string
		resource, version int64
		input             bool
		want              []int64
	}{
		{"a input_to", repo, a.ID, true, []int64{b2.ID, b1.ID}},
		{"a output_of", repo, a.ID, false, []int64{}},
		{"image output_of", image, img.ID, false, []int64{b1.ID}},
		{"image input_to", image, img.ID, true, []int64{}},
	} {
		if got := ids(c.resource, c.version, c.input); !equalIDs(got, c.want) {
			t.Errorf("%s: builds %v, want %v", c.name, got, c.want)
		}
	}
}

func equalIDs(a, b []int64) bool {
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
