package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/klauspost/compress/gzip"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events"
)

// fakeServer answers the few Concourse routes the commands use, with
// one token ("good") and scripted builds.
type fakeServer struct {
	*httptest.Server
	t *testing.T

	mu sync.Mutex
	// plans are the bodies of POST /api/v1/teams/main/builds.
	plans []concourse.Plan
	// uploads are the tar entries of each artifact upload, by artifact ID.
	uploads map[int64][]string
	// events are what a build's stream sends; status the build's.
	events []events.Event
	// artifacts are what the build kept: name -> files.
	artifacts map[string]map[string]string
	aborted   []string
	// untilAbort, if not nil, holds the event stream open after the
	// events until the build is aborted, then ends it as aborted.
	untilAbort chan struct{}
	// hijack plays an intercept session.
	hijack func(spec concourse.HijackProcessSpec, conn *websocket.Conn)
	specs  []concourse.HijackProcessSpec
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{t: t, uploads: map[int64][]string{}}
	mux := http.NewServeMux()
	authed := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if auth := r.Header.Get("Authorization"); !strings.EqualFold(auth, "bearer good") {
				http.Error(w, "not authorized", http.StatusUnauthorized)
				return
			}
			h(w, r)
		}
	}
	writeJSON := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /api/v1/info", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, concourse.Info{Version: "8.2.5", WorkerVersion: "2.5"})
	})
	mux.HandleFunc("POST /sky/issuer/token", func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		if user != "fly" || pass != "Zmx5" || r.FormValue("grant_type") != "password" ||
			r.FormValue("scope") != "openid profile email federated:id groups" {
			writeJSON(w, 400, map[string]string{"error": "invalid_request"})
			return
		}
		if r.FormValue("username") != "test" || r.FormValue("password") != "secret" {
			writeJSON(w, 401, map[string]string{"error": "invalid_grant", "error_description": "Invalid username or password"})
			return
		}
		writeJSON(w, 200, map[string]any{"access_token": "good", "token_type": "bearer", "expires_in": 86399})
	})
	mux.HandleFunc("GET /api/v1/user", authed(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"sub": "x", "name": "test", "user_id": "test", "is_admin": false, "teams": map[string][]string{"main": {"owner"}}})
	}))
	mux.HandleFunc("GET /api/v1/teams", authed(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, []concourse.Team{{ID: 1, Name: "main"}})
	}))
	mux.HandleFunc("POST /api/v1/teams/main/builds", authed(func(w http.ResponseWriter, r *http.Request) {
		var p concourse.Plan
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		f.mu.Lock()
		f.plans = append(f.plans, p)
		f.mu.Unlock()
		writeJSON(w, 201, concourse.Build{ID: 42, TeamName: "main", Name: "42", Status: concourse.StatusStarted, APIURL: "/api/v1/builds/42"})
	}))
	mux.HandleFunc("GET /api/v1/builds", authed(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, []concourse.Build{{ID: 42, TeamName: "main", Name: "42", Status: concourse.StatusSucceeded, StartTime: 100, EndTime: 103}})
	}))
	mux.HandleFunc("GET /api/v1/builds/42", authed(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, concourse.Build{ID: 42, TeamName: "main", Name: "42", Status: concourse.StatusStarted})
	}))
	mux.HandleFunc("PUT /api/v1/builds/42/abort", authed(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.aborted = append(f.aborted, "42")
		if f.untilAbort != nil && len(f.aborted) == 1 {
			close(f.untilAbort)
		}
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("GET /api/v1/builds/42/events", authed(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", events.SSEContentType)
		f.mu.Lock()
		evs := f.events
		f.mu.Unlock()
		for i, ev := range evs {
			env, err := events.NewEnvelope(ev)
			if err != nil {
				f.t.Error(err)
				return
			}
			_ = events.WriteSSE(w, uint64(i), env)
		}
		n := uint64(len(evs))
		if f.untilAbort != nil {
			w.(http.Flusher).Flush()
			<-f.untilAbort
			env, _ := events.NewEnvelope(events.Status{Status: concourse.StatusAborted})
			_ = events.WriteSSE(w, n, env)
			n++
		}
		_ = events.WriteSSEEnd(w, n)
	}))
	mux.HandleFunc("GET /api/v1/builds/42/artifacts", authed(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		list := []concourse.WorkerArtifact{}
		id := int64(100)
		for name := range f.artifacts {
			list = append(list, concourse.WorkerArtifact{ID: id, Name: name, BuildID: 42})
			id++
		}
		writeJSON(w, 200, list)
	}))
	mux.HandleFunc("GET /api/v1/teams/main/artifacts/{id}", authed(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		id := int64(100)
		for _, files := range f.artifacts {
			if fmt.Sprint(id) == r.PathValue("id") {
				_, _ = w.Write(tarGz(f.t, files))
				return
			}
			id++
		}
		http.NotFound(w, r)
	}))
	mux.HandleFunc("POST /api/v1/teams/main/artifacts", authed(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("platform") != "linux" {
			http.Error(w, "platform?", 400)
			return
		}
		names, err := tarNames(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		f.mu.Lock()
		id := int64(len(f.uploads) + 1)
		f.uploads[id] = names
		f.mu.Unlock()
		writeJSON(w, 201, concourse.WorkerArtifact{ID: id})
	}))
	mux.HandleFunc("GET /api/v1/teams/main/containers", authed(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("build_id") != "42" {
			writeJSON(w, 200, []concourse.Container{})
			return
		}
		writeJSON(w, 200, []concourse.Container{{ID: "c-1", State: "created", Type: "task", StepName: "one-off", BuildID: 42, User: "root", WorkingDirectory: "/tmp/build/x"}})
	}))
	mux.HandleFunc("GET /api/v1/teams/main/containers/c-1/hijack", authed(func(w http.ResponseWriter, r *http.Request) {
		conn, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		var spec concourse.HijackProcessSpec
		if err := conn.ReadJSON(&spec); err != nil {
			return
		}
		f.mu.Lock()
		f.specs = append(f.specs, spec)
		play := f.hijack
		f.mu.Unlock()
		play(spec, conn)
		_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	}))
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

// tarNames lists the entries of a tar+gzip stream.
func tarNames(r io.Reader) ([]string, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, nil
		}
		if err != nil {
			return nil, err
		}
		names = append(names, h.Name)
	}
}

func tarGz(t *testing.T, files map[string]string) []byte {
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(content))
	}
	_ = tw.Close()
	_ = gz.Close()
	return b.Bytes()
}

// result is one run of the program.
type result struct {
	code           int
	stdout, stderr string
}

// runner runs the program with HOME in a temporary directory.
type runner struct {
	t    *testing.T
	home string
	env  map[string]string
	dir  string
}

func newRunner(t *testing.T) *runner {
	return &runner{t: t, home: t.TempDir(), env: map[string]string{}, dir: t.TempDir()}
}

// loginTo writes a target "x" for srv with token, as login would.
func (r *runner) loginTo(srv *fakeServer, token string) {
	r.t.Helper()
	rc := fmt.Sprintf("targets:\n  x:\n    api: %s\n    team: main\n    token:\n      type: bearer\n      value: %s\n", srv.URL, token)
	if err := os.WriteFile(filepath.Join(r.home, ".flyrc"), []byte(rc), 0o600); err != nil {
		r.t.Fatal(err)
	}
}

func (r *runner) run(ctx context.Context, stdin io.Reader, args ...string) result {
	var stdout, stderr lockedBuffer
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	code := Run(ctx, args, Env{
		Stdin: stdin, Stdout: &stdout, Stderr: &stderr,
		LookupEnv: func(k string) (string, bool) {
			if k == "HOME" {
				return r.home, true
			}
			v, ok := r.env[k]
			return v, ok
		},
		WorkDir: r.dir,
	})
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
