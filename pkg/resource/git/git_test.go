package git_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/porter-ci/porter/pkg/resource"
	"github.com/porter-ci/porter/pkg/resource/git"
	"github.com/porter-ci/porter/test/testenv/gitserver"
)

func newServer(t *testing.T) *gitserver.Server {
	t.Helper()
	srv, err := gitserver.New("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

func commit(t *testing.T, srv *gitserver.Server, repo, branch string, files map[string]string, msg string) string {
	t.Helper()
	sha, err := srv.Commit(context.Background(), repo, branch, files, msg)
	if err != nil {
		t.Fatal(err)
	}
	return sha
}

func source(t *testing.T, v map[string]any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func refs(vs []resource.Version) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v["ref"])
	}
	return out
}

func checkRefs(t *testing.T, src json.RawMessage, version resource.Version) []string {
	t.Helper()
	var log bytes.Buffer
	vs, err := git.New().Check(context.Background(), resource.CheckRequest{Source: src, Version: version}, &log)
	if err != nil {
		t.Fatalf("check: %v (log: %s)", err, log.String())
	}
	return refs(vs)
}

func eq(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

func TestCheck(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	if err := srv.CreateRepo(ctx, "app", "main"); err != nil {
		t.Fatal(err)
	}
	src := source(t, map[string]any{"uri": srv.LocalURL("app"), "branch": "main"})
	if got := checkRefs(t, src, nil); len(got) != 0 {
		t.Fatalf("check of an empty repository = %v, want none", got)
	}
	c1 := commit(t, srv, "app", "main", map[string]string{"src/a.go": "a"}, "one")
	c2 := commit(t, srv, "app", "main", map[string]string{"docs/readme": "r"}, "two")
	c3 := commit(t, srv, "app", "main", map[string]string{"src/b.go": "b"}, "three")

	for _, tc := range []struct {
		name    string
		src     map[string]any
		version string
		want    []string
	}{
		{"latest without a version", nil, "", []string{c3}},
		{"from a version", nil, c1, []string{c1, c2, c3}},
		{"at the head", nil, c3, []string{c3}},
		{"version gone", nil, "0123456789012345678901234567890123456789", []string{c3}},
		{"paths", map[string]any{"paths": []string{"src"}}, c1, []string{c1, c3}},
		{"paths glob", map[string]any{"paths": []string{"docs/*"}}, "", []string{c2}},
		{"ignore paths", map[string]any{"ignore_paths": []string{"docs/"}}, c1, []string{c1, c3}},
		{"default branch", map[string]any{"branch": ""}, c2, []string{c2, c3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := map[string]any{"uri": srv.LocalURL("app"), "branch": "main"}
			for k, v := range tc.src {
				s[k] = v
			}
			var version resource.Version
			if tc.version != "" {
				version = resource.Version{"ref": tc.version}
			}
			if got := checkRefs(t, source(t, s), version); !eq(got, tc.want) {
				t.Fatalf("check = %v, want %v", got, tc.want)
			}
		})
	}

	if got := checkRefs(t, source(t, map[string]any{"uri": srv.LocalURL("app"), "branch": "nope"}), nil); len(got) != 0 {
		t.Fatalf("check of a missing branch = %v, want none", got)
	}
	_, err := git.New().Check(ctx, resource.CheckRequest{Source: source(t, map[string]any{"uri": srv.LocalURL("missing"), "branch": "main"})}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "missing.git") {
		t.Fatalf("check of a missing repository: err = %v", err)
	}
	_, err = git.New().Check(ctx, resource.CheckRequest{Source: source(t, map[string]any{"branch": "main"})}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "source.uri is required") {
		t.Fatalf("check without uri: err = %v", err)
	}
}

func get(t *testing.T, src json.RawMessage, params string, ref string) (string, resource.Response, error) {
	t.Helper()
	dir := t.TempDir()
	var log bytes.Buffer
	resp, err := git.New().In(context.Background(), dir, resource.InRequest{Source: src, Params: json.RawMessage(params), Version: resource.Version{"ref": ref}}, &log)
	return dir, resp, err
}

func TestIn(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	if err := srv.CreateRepo(ctx, "app", "main"); err != nil {
		t.Fatal(err)
	}
	c1 := commit(t, srv, "app", "main", map[string]string{"file": "one"}, "first commit")
	c2 := commit(t, srv, "app", "main", map[string]string{"file": "two"}, "second commit")
	commit(t, srv, "app", "main", map[string]string{"file": "three"}, "third commit")
	src := source(t, map[string]any{"uri": srv.LocalURL("app"), "branch": "main"})

	dir, resp, err := get(t, src, `{}`, c2)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "file")); string(b) != "two" {
		t.Fatalf("file at %s = %q, want two", c2, b)
	}
	for name, want := range map[string]string{"ref": c2 + "\n", "short_ref": c2[:7] + "\n", "commit_message": "second commit\n", "committer": "test@porter.local\n"} {
		if b, _ := os.ReadFile(filepath.Join(dir, ".git", name)); string(b) != want {
			t.Errorf(".git/%s = %q, want %q", name, b, want)
		}
	}
	if resp.Version["ref"] != c2 {
		t.Fatalf("version = %v", resp.Version)
	}
	md := map[string]string{}
	for _, f := range resp.Metadata {
		md[f.Name] = f.Value
	}
	if md["commit"] != c2 || md["author"] != "Porter Test" || md["branch"] != "main" || md["message"] != "second commit" || md["author_date"] == "" {
		t.Fatalf("metadata = %v", md)
	}

	// A shallow clone that does not reach the commit is redone in full.
	dir, _, err = get(t, src, `{"depth":1}`, c1)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "file")); string(b) != "one" {
		t.Fatalf("file at %s (depth 1) = %q, want one", c1, b)
	}

	_, _, err = get(t, src, `{}`, "0123456789012345678901234567890123456789")
	if err == nil || !strings.Contains(err.Error(), "is not on branch main") {
		t.Fatalf("get of a missing commit: err = %v", err)
	}
	_, _, err = get(t, src, `{"depht":1}`, c1)
	if err == nil || !strings.Contains(err.Error(), `unknown field "depht"`) {
		t.Fatalf("typo in params: err = %v", err)
	}
}

func TestOut(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	if err := srv.CreateRepo(ctx, "app", "main"); err != nil {
		t.Fatal(err)
	}
	commit(t, srv, "app", "main", map[string]string{"file": "one"}, "first")
	src := source(t, map[string]any{"uri": srv.LocalURL("app"), "branch": "main"})
	head, err := srv.Head(ctx, "app", "main")
	if err != nil {
		t.Fatal(err)
	}

	// A put's directory holds its inputs by name: fetch into DIR/repo.
	putDir := t.TempDir()
	if _, err := git.New().In(ctx, filepath.Join(putDir, "repo"), resource.InRequest{Source: src, Version: resource.Version{"ref": head}}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	newCommit := commitLocal(t, filepath.Join(putDir, "repo"), "file", "two", "second, from a task")

	put := func(params string) (resource.Response, error) {
		var log bytes.Buffer
		return git.New().Out(ctx, putDir, resource.OutRequest{Source: src, Params: json.RawMessage(params)}, &log)
	}
	resp, err := put(`{"repository":"repo"}`)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Version["ref"] != newCommit {
		t.Fatalf("put version = %v, want %s", resp.Version, newCommit)
	}
	if got, _ := srv.Head(ctx, "app", "main"); got != newCommit {
		t.Fatalf("server's main = %s, want %s", got, newCommit)
	}
	if got, _ := srv.File(ctx, "app", "main", "file"); got != "two" {
		t.Fatalf("server's file = %q", got)
	}
	// Again: already up to date is fine.
	if _, err := put(`{"repository":"repo"}`); err != nil {
		t.Fatalf("second put of the same commit: %v", err)
	}
	// To another branch, created by the push.
	if _, err := put(`{"repository":"repo","branch":"release"}`); err != nil {
		t.Fatal(err)
	}
	if got, _ := srv.Head(ctx, "app", "release"); got != newCommit {
		t.Fatalf("server's release = %s, want %s", got, newCommit)
	}

	// The branch moves on elsewhere: a push of a diverged history is refused
	// unless forced.
	commit(t, srv, "app", "main", map[string]string{"other": "x"}, "elsewhere")
	diverged := commitLocal(t, filepath.Join(putDir, "repo"), "file", "three", "diverged")
	if _, err := put(`{"repository":"repo"}`); err == nil || !strings.Contains(err.Error(), "non-fast-forward") {
		t.Fatalf("push of a diverged history without force: err = %v", err)
	}
	if _, err := put(`{"repository":"repo","force":true}`); err != nil {
		t.Fatalf("forced push: %v", err)
	}
	if got, _ := srv.Head(ctx, "app", "main"); got != diverged {
		t.Fatalf("server's main after a forced push = %s, want %s", got, diverged)
	}

	if _, err := put(`{}`); err == nil || !strings.Contains(err.Error(), "params.repository is required") {
		t.Fatalf("put without repository: err = %v", err)
	}
	if _, err := put(`{"repository":"../x"}`); err == nil || !strings.Contains(err.Error(), "leaves") {
		t.Fatalf("put of a path outside: err = %v", err)
	}
}

func commitLocal(t *testing.T, dir, file, content, msg string) string {
	t.Helper()
	repo, err := gogit.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := wt.Add(file); err != nil {
		t.Fatal(err)
	}
	sig := &object.Signature{Name: "Task", Email: "task@porter.local", When: time.Now()}
	h, err := wt.Commit(msg, &gogit.CommitOptions{Author: sig, Committer: sig})
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

func TestCredentials(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	if err := srv.CreateRepo(ctx, "private", "main"); err != nil {
		t.Fatal(err)
	}
	sha := commit(t, srv, "private", "main", map[string]string{"secret": "s"}, "private commit")
	srv.RequireBasicAuth("ci", "s3cret")

	_, err := git.New().Check(ctx, resource.CheckRequest{Source: source(t, map[string]any{"uri": srv.LocalURL("private"), "branch": "main"})}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "authentication required") {
		t.Fatalf("check without credentials: err = %v", err)
	}
	_, err = git.New().Check(ctx, resource.CheckRequest{Source: source(t, map[string]any{"uri": srv.LocalURL("private"), "branch": "main", "username": "ci", "password": "wrong"})}, &bytes.Buffer{})
	if err == nil {
		t.Fatal("check with a wrong password succeeded")
	}
	src := source(t, map[string]any{"uri": srv.LocalURL("private"), "branch": "main", "username": "ci", "password": "s3cret"})
	if got := checkRefs(t, src, nil); !eq(got, []string{sha}) {
		t.Fatalf("check with credentials = %v, want %s", got, sha)
	}
	putDir := t.TempDir()
	if _, err := git.New().In(ctx, filepath.Join(putDir, "repo"), resource.InRequest{Source: src, Version: resource.Version{"ref": sha}}, &bytes.Buffer{}); err != nil {
		t.Fatalf("get with credentials: %v", err)
	}
	next := commitLocal(t, filepath.Join(putDir, "repo"), "secret", "t", "second")
	if _, err := git.New().Out(ctx, putDir, resource.OutRequest{Source: src, Params: json.RawMessage(`{"repository":"repo"}`)}, &bytes.Buffer{}); err != nil {
		t.Fatalf("put with credentials: %v", err)
	}
	if got, _ := srv.Head(ctx, "private", "main"); got != next {
		t.Fatalf("server's main = %s, want %s", got, next)
	}

	_, err = git.New().Check(ctx, resource.CheckRequest{Source: source(t, map[string]any{"uri": "ssh://git@127.0.0.1:1/x.git", "branch": "main", "private_key": "not a key"})}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "source.private_key") {
		t.Fatalf("check with a bad private key: err = %v", err)
	}
}
