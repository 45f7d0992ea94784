package atcclient_test

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"

	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
)

func newClient(t *testing.T, h http.Handler, token string) *atcclient.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := atcclient.New(atcclient.Options{URL: srv.URL + "/", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// uploadServer records the entries of each upload.
func uploadServer(t *testing.T, got *[]string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/teams/main/artifacts" || r.URL.Query().Get("platform") != "linux" ||
			r.Header.Get("Authorization") != "Bearer tok" || r.Header.Get("Content-Type") != "application/octet-stream" {
			t.Errorf("request %s %s %v", r.Method, r.URL, r.Header)
		}
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		tr := tar.NewReader(gz)
		*got = nil
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Error(err)
				return
			}
			*got = append(*got, strings.TrimSuffix(h.Name, "/"))
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":4,"name":"","build_id":0,"created_at":1}`)
	})
}

func TestUploadHonoursGitignore(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}, {"config", "user.email", "t@example.com"}, {"config", "user.name", "t"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	write(t, dir, ".gitignore", "*.log\nbuild/\n")
	write(t, dir, "src/main.go", "package main")
	write(t, dir, "gone.txt", "x")
	write(t, dir, "debug.log", "noise")
	write(t, dir, "build/out.bin", "bin")
	write(t, dir, "new.txt", "untracked")
	if out, err := exec.Command("git", "-C", dir, "add", ".gitignore", "src", "gone.txt").CombinedOutput(); err != nil {
		t.Fatalf("git add: %v\n%s", err, out)
	}
	if err := os.Remove(filepath.Join(dir, "gone.txt")); err != nil {
		t.Fatal(err)
	}

	var got []string
	c := newClient(t, uploadServer(t, &got), "tok")
	art, err := c.UploadArtifact(context.Background(), "", dir, atcclient.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if art.ID != 4 {
		t.Errorf("artifact %+v", art)
	}
	slices.Sort(got)
	if want := []string{".gitignore", "new.txt", "src", "src/main.go"}; !reflect.DeepEqual(got, want) {
		t.Errorf("sent %q, want %q", got, want)
	}

	if _, err := c.UploadArtifact(context.Background(), "", dir, atcclient.UploadOptions{IncludeIgnored: true}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"debug.log", "build/out.bin", ".git/HEAD"} {
		if !slices.Contains(got, name) {
			t.Errorf("--include-ignored sent %q, want %s in it", got, name)
		}
	}
}

func TestUploadOutsideGitSendsEverything(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a/b.txt", "b")
	write(t, dir, "x.log", "x")
	var got []string
	c := newClient(t, uploadServer(t, &got), "tok")
	if _, err := c.UploadArtifact(context.Background(), "", dir, atcclient.UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a/b.txt", "x.log"} {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.TrimPrefix(g, "./") == name }) {
			t.Errorf("sent %q, want %s in it", got, name)
		}
	}
}

func TestErrorsByStatus(t *testing.T) {
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/builds/1":
			http.Error(w, "", http.StatusUnauthorized)
		case "/api/v1/builds/2":
			http.Error(w, "not your team", http.StatusForbidden)
		case "/api/v1/builds/4":
			// Concourse's JSON-API shape, which the API answers 404s in.
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"errors":[{"title":"Not Found","detail":"build 4: not found","status":"404"}]}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"errors":["build not found"]}`)
		}
	}), "old")
	ctx := context.Background()
	_, err := c.Build(ctx, 1)
	if !atcclient.IsUnauthorized(err) || !strings.Contains(err.Error(), "log in again") {
		t.Errorf("401: %v", err)
	}
	_, err = c.Build(ctx, 2)
	var e *atcclient.Error
	if !atcclient.IsForbidden(err) || !errors.As(err, &e) || e.Message != "not your team" {
		t.Errorf("403: %v", err)
	}
	if _, err = c.Build(ctx, 3); !atcclient.IsNotFound(err) || !strings.Contains(err.Error(), "build not found") {
		t.Errorf("404: %v", err)
	}
	if _, err = c.Build(ctx, 4); !atcclient.IsNotFound(err) || !strings.Contains(err.Error(), "build 4: not found") {
		t.Errorf("JSON-API 404: %v", err)
	}
}

func TestLogin(t *testing.T) {
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		if r.URL.Path != "/sky/issuer/token" || user != "fly" || pass != "Zmx5" || r.Header.Get("Authorization") == "Bearer x" {
			t.Errorf("request %s %v", r.URL, r.Header)
		}
		if r.FormValue("password") != "pw" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"invalid_grant","error_description":"Invalid username or password"}`)
			return
		}
		_, _ = io.WriteString(w, `{"access_token":"T","token_type":"bearer","expires_in":3600}`)
	}), "x")
	tok, err := c.Login(context.Background(), "test", "pw")
	if err != nil || tok.Type != "bearer" || tok.Value != "T" || tok.Expiry.IsZero() {
		t.Errorf("token %+v err %v", tok, err)
	}
	if _, err := c.Login(context.Background(), "test", "bad"); !atcclient.IsUnauthorized(err) || !strings.Contains(err.Error(), "Invalid username") {
		t.Errorf("bad password: %v", err)
	}
}

func TestBuildEventsAndPlan(t *testing.T) {
	var plan concourse.Plan
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/teams/other/builds":
			_ = jsonDecode(r.Body, &plan)
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":5,"team_name":"other","name":"5","status":"started","api_url":"/api/v1/builds/5"}`)
		case "/api/v1/builds/5/events":
			w.Header().Set("Content-Type", events.SSEContentType)
			env, _ := events.NewEnvelope(events.Status{Status: concourse.StatusSucceeded})
			_ = events.WriteSSE(w, 0, env)
			_ = events.WriteSSEEnd(w, 1)
		}
	}), "tok")
	ctx := context.Background()
	b, err := c.CreateBuild(ctx, "other", concourse.Plan{ID: "1", Task: &concourse.TaskPlan{Name: "one-off"}})
	if err != nil || b.ID != 5 || plan.Task == nil {
		t.Fatalf("build %+v plan %+v err %v", b, plan, err)
	}
	s, err := c.BuildEvents(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, env, err := s.Next(); err != nil || env.Event != events.EventTypeStatus {
		t.Errorf("first event %v %v", env, err)
	}
	if _, _, err := s.Next(); err != io.EOF {
		t.Errorf("after end: %v, want EOF", err)
	}
	if got := c.HijackURL("", "h 1"); !strings.HasPrefix(got, "ws://") || !strings.HasSuffix(got, "/api/v1/teams/main/containers/h%201/hijack") {
		t.Errorf("hijack URL %s", got)
	}
}

func jsonDecode(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }
