package git_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/porter-ci/porter/pkg/resource"
	"github.com/porter-ci/porter/pkg/resource/git"
)

// dumbServer serves the bare repositories under root as static files, as a
// dumb HTTP git server does, and records the paths asked for.
type dumbServer struct {
	*httptest.Server
	mu    sync.Mutex
	paths []string
	// swap, when set, serves the file at swap[path] in place of path.
	swap map[string]string
}

func newDumbServer(t *testing.T, root string) *dumbServer {
	t.Helper()
	d := &dumbServer{swap: map[string]string{}}
	files := http.FileServer(http.Dir(root))
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.paths = append(d.paths, r.URL.Path)
		if to, ok := d.swap[r.URL.Path]; ok {
			r.URL.Path = to
		}
		d.mu.Unlock()
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(d.Close)
	return d
}

// asked reports whether a path containing part was requested.
func (d *dumbServer) asked(part string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.paths {
		if strings.Contains(p, part) {
			return true
		}
	}
	return false
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// looseObject is the path of sha's loose object under a repository.
func looseObject(sha string) string { return "objects/" + sha[:2] + "/" + sha[2:] }

func TestDumbHTTP(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	if err := srv.CreateRepo(ctx, "app", "main"); err != nil {
		t.Fatal(err)
	}
	if err := srv.CreateRepo(ctx, "empty", "main"); err != nil {
		t.Fatal(err)
	}
	bare := srv.Dir("app")
	c1 := commit(t, srv, "app", "main", map[string]string{"src/a.go": "a"}, "one")
	c2 := commit(t, srv, "app", "main", map[string]string{"docs/readme": "r"}, "two")
	// The first two commits packed, the third loose: both ways of serving objects.
	gitIn(t, bare, "repack", "-a", "-d", "-q")
	gitIn(t, bare, "update-server-info")
	c3 := commit(t, srv, "app", "main", map[string]string{"src/b.go": "b"}, "three")
	if _, err := os.Stat(filepath.Join(bare, looseObject(c3))); err != nil {
		t.Fatalf("the third commit should be a loose object: %v", err)
	}
	if _, err := os.Stat(filepath.Join(bare, looseObject(c1))); err == nil {
		t.Fatal("the first commit should be packed only")
	}

	dumb := newDumbServer(t, filepath.Dir(bare))
	uri := dumb.URL + "/app.git"
	for _, tc := range []struct {
		name    string
		src     map[string]any
		version string
		want    []string
	}{
		{"latest without a version", nil, "", []string{c3}},
		{"from a version", nil, c1, []string{c1, c2, c3}},
		{"paths", map[string]any{"paths": []string{"src"}}, c1, []string{c1, c3}},
		{"ignore paths", map[string]any{"ignore_paths": []string{"src/"}}, "", []string{c2}},
		{"default branch", map[string]any{"branch": ""}, c2, []string{c2, c3}},
		{"missing branch", map[string]any{"branch": "nope"}, "", nil},
	} {
		t.Run("check "+tc.name, func(t *testing.T) {
			s := map[string]any{"uri": uri, "branch": "main"}
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
	if got := checkRefs(t, source(t, map[string]any{"uri": dumb.URL + "/empty.git", "branch": "main"}), nil); len(got) != 0 {
		t.Fatalf("check of an empty repository = %v, want none", got)
	}
	if !dumb.asked("/app.git/objects/pack/pack-") || !dumb.asked("/app.git/"+looseObject(c3)) {
		t.Fatalf("the checks read neither a pack nor a loose object: %v", dumb.paths)
	}

	src := source(t, map[string]any{"uri": uri, "branch": "main"})
	for _, tc := range []struct {
		ref, params string
		files       map[string]string
	}{
		{c2, `{}`, map[string]string{"src/a.go": "a", "docs/readme": "r", "src/b.go": ""}},
		{c3, `{"depth":1}`, map[string]string{"src/a.go": "a", "src/b.go": "b"}},
		{c1, `{"depth":1}`, map[string]string{"src/a.go": "a", "docs/readme": ""}},
	} {
		dir, resp, err := get(t, src, tc.params, tc.ref)
		if err != nil {
			t.Fatalf("get %s %s: %v", tc.ref, tc.params, err)
		}
		if resp.Version["ref"] != tc.ref {
			t.Fatalf("get %s: version %v", tc.ref, resp.Version)
		}
		for name, want := range tc.files {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if want == "" && !os.IsNotExist(err) || want != "" && string(b) != want {
				t.Errorf("get %s: %s = %q (%v), want %q", tc.ref, name, b, err, want)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(dir, ".git", "ref")); string(b) != tc.ref+"\n" {
			t.Errorf("get %s: .git/ref = %q", tc.ref, b)
		}
		// The clone is a git repository the host's git reads as a clone.
		got := gitIn(t, dir, "rev-parse", "HEAD") + " " + gitIn(t, dir, "rev-parse", "--abbrev-ref", "HEAD") + " " + gitIn(t, dir, "rev-parse", "@{upstream}")
		if got != tc.ref+" main "+c3 {
			t.Errorf("get %s: HEAD, its branch and upstream = %q", tc.ref, got)
		}
	}
	if _, _, err := get(t, src, `{}`, "0123456789012345678901234567890123456789"); err == nil || !strings.Contains(err.Error(), "is not on branch main") {
		t.Fatalf("get of a missing commit: err = %v", err)
	}

	// A put cannot go through a dumb server, and says why.
	putDir := t.TempDir()
	if _, err := git.New().In(ctx, filepath.Join(putDir, "repo"), resource.InRequest{Source: src, Version: resource.Version{"ref": c3}}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	commitLocal(t, filepath.Join(putDir, "repo"), "file", "x", "from a task")
	_, err := git.New().Out(ctx, putDir, resource.OutRequest{Source: src, Params: json.RawMessage(`{"repository":"repo"}`)}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "dumb HTTP protocol") || !strings.Contains(err.Error(), "cannot receive a push") {
		t.Fatalf("put to a dumb server: err = %v", err)
	}
}

// A get deeper than its depth clones again in full, fetching again the
// packs the shallow clone had: one pack a commit here.
func TestDumbHTTPDeeperThanDepth(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	if err := srv.CreateRepo(ctx, "app", "main"); err != nil {
		t.Fatal(err)
	}
	bare := srv.Dir("app")
	var shas []string
	for _, content := range []string{"one", "two", "three"} {
		shas = append(shas, commit(t, srv, "app", "main", map[string]string{"file": content}, content))
		gitIn(t, bare, "repack", "-d", "-q") // the new loose objects into a pack of their own
	}
	gitIn(t, bare, "update-server-info")
	if packs, _ := filepath.Glob(filepath.Join(bare, "objects", "pack", "*.pack")); len(packs) != 3 {
		t.Fatalf("%d packs, want 3", len(packs))
	}
	dumb := newDumbServer(t, filepath.Dir(bare))
	src := source(t, map[string]any{"uri": dumb.URL + "/app.git", "branch": "main"})
	dir, _, err := get(t, src, `{"depth":1}`, shas[0])
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "file")); string(b) != "one" {
		t.Fatalf("file at %s (depth 1) = %q, want one", shas[0], b)
	}
}

// An object whose content does not hash to its name is refused.
func TestDumbHTTPRefusesAnotherObject(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	if err := srv.CreateRepo(ctx, "app", "main"); err != nil {
		t.Fatal(err)
	}
	c1 := commit(t, srv, "app", "main", map[string]string{"f": "1"}, "one")
	c2 := commit(t, srv, "app", "main", map[string]string{"f": "2"}, "two")
	dumb := newDumbServer(t, filepath.Dir(srv.Dir("app")))
	dumb.swap["/app.git/"+looseObject(c2)] = "/app.git/" + looseObject(c1)
	_, err := git.New().Check(ctx, resource.CheckRequest{Source: source(t, map[string]any{"uri": dumb.URL + "/app.git", "branch": "main"})}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "hashes to "+c1) {
		t.Fatalf("check with a wrong object served: err = %v", err)
	}
}

// A page that is neither protocol's answer is said to be so.
func TestDumbHTTPNotARepository(t *testing.T) {
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<html><body>sign in</body></html>\n"))
	}))
	t.Cleanup(page.Close)
	_, err := git.New().Check(context.Background(), resource.CheckRequest{Source: source(t, map[string]any{"uri": page.URL + "/app.git", "branch": "main"})}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "neither git's smart advertisement nor a dumb server's file") {
		t.Fatalf("check of an HTML page: err = %v", err)
	}
}

// Credentials go with every request to a dumb server.
func TestDumbHTTPCredentials(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	if err := srv.CreateRepo(ctx, "private", "main"); err != nil {
		t.Fatal(err)
	}
	sha := commit(t, srv, "private", "main", map[string]string{"secret": "s"}, "private commit")
	files := http.FileServer(http.Dir(filepath.Dir(srv.Dir("private"))))
	locked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "ci" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="dumb"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(locked.Close)
	uri := locked.URL + "/private.git"
	_, err := git.New().Check(ctx, resource.CheckRequest{Source: source(t, map[string]any{"uri": uri, "branch": "main"})}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "authentication required") {
		t.Fatalf("check without credentials: err = %v", err)
	}
	src := source(t, map[string]any{"uri": uri, "branch": "main", "username": "ci", "password": "s3cret"})
	if got := checkRefs(t, src, nil); !eq(got, []string{sha}) {
		t.Fatalf("check with credentials = %v, want %s", got, sha)
	}
	dir, _, err := get(t, src, `{}`, sha)
	if err != nil {
		t.Fatalf("get with credentials: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "secret")); string(b) != "s" {
		t.Fatalf("secret = %q", b)
	}
}

// A repository that moved is read where info/refs was redirected to.
func TestDumbHTTPRedirect(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t)
	if err := srv.CreateRepo(ctx, "app", "main"); err != nil {
		t.Fatal(err)
	}
	sha := commit(t, srv, "app", "main", map[string]string{"f": "moved"}, "one")
	files := http.FileServer(http.Dir(filepath.Dir(srv.Dir("app"))))
	moved := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rest, ok := strings.CutPrefix(r.URL.Path, "/old.git/"); ok {
			if rest != "info/refs" {
				t.Errorf("%s asked at the old place: only info/refs should be", r.URL.Path)
			}
			http.Redirect(w, r, "/app.git/"+rest+"?"+r.URL.RawQuery, http.StatusMovedPermanently)
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(moved.Close)
	src := source(t, map[string]any{"uri": moved.URL + "/old.git", "branch": "main"})
	if got := checkRefs(t, src, nil); !eq(got, []string{sha}) {
		t.Fatalf("check = %v, want %s", got, sha)
	}
	dir, _, err := get(t, src, `{}`, sha)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != "moved" {
		t.Fatalf("f = %q", b)
	}
}
