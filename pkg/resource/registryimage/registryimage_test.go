package registryimage_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/porter-ci/porter/pkg/resource"
	"github.com/porter-ci/porter/pkg/resource/registryimage"
)

// newRegistry starts a real (in-process) registry and returns its host:port.
func newRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func push(t *testing.T, ref string, img v1.Image) string {
	t.Helper()
	r, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func randomImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func src(t *testing.T, m map[string]any) json.RawMessage {
	t.Helper()
	m["insecure"] = true
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func digests(vs []resource.Version) string {
	var out []string
	for _, v := range vs {
		out = append(out, v["digest"])
	}
	return strings.Join(out, ",")
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t)
	repo := reg + "/team/app"
	typ := registryimage.New()
	check := func(source json.RawMessage, version resource.Version) string {
		t.Helper()
		vs, err := typ.Check(ctx, resource.CheckRequest{Source: source, Version: version}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		return digests(vs)
	}
	if got := check(src(t, map[string]any{"repository": repo}), nil); got != "" {
		t.Fatalf("check before any push = %q, want none", got)
	}
	d1 := push(t, repo+":latest", randomImage(t))
	if got := check(src(t, map[string]any{"repository": repo}), nil); got != d1 {
		t.Fatalf("check = %q, want %s", got, d1)
	}
	d2 := push(t, repo+":latest", randomImage(t))
	if got := check(src(t, map[string]any{"repository": repo}), resource.Version{"digest": d1}); got != d1+","+d2 {
		t.Fatalf("check from the previous digest = %q, want %s,%s", got, d1, d2)
	}
	if got := check(src(t, map[string]any{"repository": repo}), resource.Version{"digest": d2}); got != d2 {
		t.Fatalf("check at the current digest = %q", got)
	}
	gone := "sha256:" + strings.Repeat("0", 64)
	if got := check(src(t, map[string]any{"repository": repo}), resource.Version{"digest": gone}); got != d2 {
		t.Fatalf("check from a vanished digest = %q, want only %s", got, d2)
	}
	d3 := push(t, repo+":1.0-slim", randomImage(t))
	if got := check(src(t, map[string]any{"repository": repo, "tag": "1.0", "variant": "slim"}), nil); got != d3 {
		t.Fatalf("check of tag 1.0 variant slim = %q, want %s", got, d3)
	}

	for source, want := range map[string]string{
		`{}`:                             "source.repository is required",
		`{"repository":"x","tga":"1"}`:   `unknown field "tga"`,
		`{"repository":"x:1"}`:           "must not carry a tag",
		`{"repository":"x","tag":"a b"}`: "source.tag",
	} {
		if _, err := typ.Check(ctx, resource.CheckRequest{Source: json.RawMessage(source)}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("source %s: err = %v, want it to mention %q", source, err, want)
		}
	}
}

func TestInAndOut(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t)
	repo := reg + "/team/app"
	typ := registryimage.New()

	// An image with a known file, so rootfs can be checked.
	layer := static.NewLayer(tarOf(t, map[string]string{"etc/hello": "world"}), types.OCIUncompressedLayer)
	img, err := mutate.AppendLayers(randomImage(t), layer)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Env: []string{"A=1"}, User: "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	digest := push(t, repo+":latest", img)
	source := src(t, map[string]any{"repository": repo})
	get := func(params string) (string, resource.Response, error) {
		dir := t.TempDir()
		resp, err := typ.In(ctx, dir, resource.InRequest{Source: source, Params: json.RawMessage(params), Version: resource.Version{"digest": digest}}, &bytes.Buffer{})
		return dir, resp, err
	}

	dir, resp, err := get(`{}`)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Version["digest"] != digest {
		t.Fatalf("in version = %v", resp.Version)
	}
	for n, want := range map[string]string{"repository": repo, "tag": "latest", "digest": digest} {
		if b, _ := os.ReadFile(filepath.Join(dir, n)); string(b) != want {
			t.Errorf("%s = %q, want %q", n, b, want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("default get wrote %d files, want only repository, tag, digest", len(entries))
	}

	dir, _, err = get(`{"format":"rootfs"}`)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "rootfs", "etc", "hello")); string(b) != "world" {
		t.Fatalf("rootfs/etc/hello = %q", b)
	}
	var md struct {
		Env  []string `json:"env"`
		User string   `json:"user"`
	}
	if b, err := os.ReadFile(filepath.Join(dir, "metadata.json")); err != nil || json.Unmarshal(b, &md) != nil || md.User != "nobody" || len(md.Env) != 1 {
		t.Fatalf("metadata.json = %+v, %v", md, err)
	}

	// oci: image.tar, which a put pushes back unchanged (same digest).
	ociDir, _, err := get(`{"format":"oci"}`)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ociDir, "more-tags"), []byte("v1 v1.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := reg + "/team/copy"
	putResp, err := typ.Out(ctx, filepath.Dir(ociDir), resource.OutRequest{
		Source: src(t, map[string]any{"repository": other, "tag": "v1-rc"}),
		Params: json.RawMessage(`{"image":"` + filepath.Base(ociDir) + `/image.*","additional_tags":"` + filepath.Base(ociDir) + `/more-tags"}`),
	}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if putResp.Version["digest"] != digest {
		t.Fatalf("put of the fetched image.tar = %v, want %s", putResp.Version, digest)
	}
	for _, tag := range []string{"v1-rc", "v1", "v1.0"} {
		r, _ := name.NewTag(other+":"+tag, name.Insecure)
		d, err := remote.Head(r)
		if err != nil || d.Digest.String() != digest {
			t.Errorf("%s: %v, %v; want %s", r, d, err, digest)
		}
	}

	// A docker-save tarball and an OCI layout directory push too.
	putDir := t.TempDir()
	img2 := randomImage(t)
	d2, _ := img2.Digest()
	if err := tarball.WriteToFile(filepath.Join(putDir, "docker.tar"), mustTag(t, "x/y:z"), img2); err != nil {
		t.Fatal(err)
	}
	lp, err := layout.Write(filepath.Join(putDir, "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	img3 := randomImage(t)
	d3, _ := img3.Digest()
	if err := lp.AppendImage(img3); err != nil {
		t.Fatal(err)
	}
	for image, want := range map[string]v1.Hash{"docker.tar": d2, "layout": d3} {
		resp, err := typ.Out(ctx, putDir, resource.OutRequest{Source: source, Params: json.RawMessage(`{"image":"` + image + `"}`)}, &bytes.Buffer{})
		if err != nil || resp.Version["digest"] != want.String() {
			t.Errorf("put %s: %v, %v; want %s", image, resp.Version, err, want)
		}
	}

	// Bad input.
	gone := "sha256:" + strings.Repeat("0", 64)
	_, err = typ.In(ctx, t.TempDir(), resource.InRequest{Source: source, Version: resource.Version{"digest": gone}}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("get of a vanished digest: err = %v", err)
	}
	if _, _, err := get(`{"format":"tarball"}`); err == nil || !strings.Contains(err.Error(), `params.format "tarball"`) {
		t.Errorf("bad format: err = %v", err)
	}
	for params, want := range map[string]string{
		`{}`:                    "params.image is required",
		`{"image":"nothing/*"}`: "matches 0 paths",
		`{"image":"../etc/x"}`:  "leaves",
	} {
		if _, err := typ.Out(ctx, putDir, resource.OutRequest{Source: source, Params: json.RawMessage(params)}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("put %s: err = %v, want it to mention %q", params, err, want)
		}
	}
}

func mustTag(t *testing.T, s string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(s)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// An image tarball to push cannot write outside the scratch directory it is
// unpacked into, not even through a symlink it made.
func TestTarballStaysInside(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t)
	outside := t.TempDir()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "escape", Typeflag: tar.TypeSymlink, Linkname: outside, Mode: 0o777},
		{Name: "escape/pwned", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	putDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(putDir, "image.tar"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := registryimage.New().Out(ctx, putDir, resource.OutRequest{
		Source: src(t, map[string]any{"repository": reg + "/evil"}), Params: json.RawMessage(`{"image":"image.tar"}`),
	}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "escape") {
		t.Fatalf("push of a tarball writing through a symlink: err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "pwned")); err == nil {
		t.Fatal("the tarball wrote outside its directory")
	}
}

func TestRegistryMirrorServesDockerHubOnly(t *testing.T) {
	ctx := context.Background()
	mirror := newRegistry(t)
	digest := push(t, mirror+"/library/busybox:latest", randomImage(t))
	ty := registryimage.New()

	got, err := ty.Check(ctx, resource.CheckRequest{Source: src(t, map[string]any{
		"repository": "busybox", "registry_mirror": map[string]any{"host": mirror}})}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if digests(got) != digest {
		t.Fatalf("check through the mirror = %s, want %s", digests(got), digest)
	}
	dir := t.TempDir()
	if _, err := ty.In(ctx, dir, resource.InRequest{Source: src(t, map[string]any{
		"repository": "busybox", "registry_mirror": map[string]any{"host": mirror}}),
		Version: resource.Version{"digest": digest}}, io.Discard); err != nil {
		t.Fatal(err)
	}
	// The files name the repository as the pipeline does, not the mirror.
	if b, _ := os.ReadFile(filepath.Join(dir, "repository")); string(b) != "busybox" {
		t.Errorf("repository file = %q, want busybox", b)
	}

	// A repository of another registry is asked of that registry.
	other := newRegistry(t)
	otherDigest := push(t, other+"/team/app:latest", randomImage(t))
	got, err = ty.Check(ctx, resource.CheckRequest{Source: src(t, map[string]any{
		"repository": other + "/team/app", "registry_mirror": map[string]any{"host": mirror}})}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if digests(got) != otherDigest {
		t.Fatalf("check of another registry = %s, want %s", digests(got), otherDigest)
	}
}
