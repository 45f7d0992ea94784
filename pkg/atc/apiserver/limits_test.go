package apiserver

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
)

// TestBodyLimits runs a handler that reads its body, as the API's do,
// behind limitBodies on a real HTTP server.
func TestBodyLimits(t *testing.T) {
	s, err := New(Config{Limits: Limits{MaxArtifactUpload: 1000, MaxRequestBody: 100}}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	read := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			s.fail(w, r, apierr.BadRequest(err))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(s.limitBodies(read))
	defer srv.Close()
	for _, c := range []struct {
		name, path string
		size       int
		chunked    bool
		want       int
		flag       string
	}{
		{"json under the limit", "/api/v1/teams/main/pipelines/p/config", 100, false, http.StatusNoContent, ""},
		{"json over the limit, declared", "/api/v1/teams/main/pipelines/p/config", 101, false, http.StatusRequestEntityTooLarge, "max-request-body"},
		{"json over the limit, chunked", "/api/v1/teams/main/pipelines/p/config", 101, true, http.StatusRequestEntityTooLarge, "max-request-body"},
		{"upload under the limit", "/api/v1/teams/main/artifacts", 1000, true, http.StatusNoContent, ""},
		{"upload over the limit, chunked", "/api/v1/teams/main/artifacts", 1001, true, http.StatusRequestEntityTooLarge, "max-artifact-upload"},
		{"upload over the limit, declared", "/api/v1/teams/main/artifacts", 5000, false, http.StatusRequestEntityTooLarge, "max-artifact-upload"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(strings.Repeat("x", c.size))
			if c.chunked {
				body = io.MultiReader(body) // unknown length: sent chunked
			}
			resp, err := http.Post(srv.URL+c.path, "application/octet-stream", body)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			msg, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.want {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, msg, c.want)
			}
			if c.flag != "" && !strings.Contains(string(msg), "--"+c.flag) {
				t.Fatalf("message %s does not name --%s", msg, c.flag)
			}
		})
	}
}

// TestUploadReadTimeoutBoundsStalls: on the API's real server, an upload
// that keeps sending goes on past the read timeout, one that stalls
// longer than it is cut off, and so is an ordinary request read too slowly.
func TestUploadReadTimeoutBoundsStalls(t *testing.T) {
	const timeout = 300 * time.Millisecond
	s, err := New(Config{Limits: Limits{UploadStall: timeout}}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	read := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			s.fail(w, r, apierr.BadRequest(err))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewUnstartedServer(nil)
	// As the ATC serves the API: the read timeout bounds ordinary requests.
	srv.Config = &http.Server{Handler: s.limitBodies(read), ReadTimeout: timeout}
	srv.Start()
	defer srv.Close()

	// send writes n chunks with gap between them, as a chunked body.
	send := func(path string, n int, gap time.Duration) (int, error) {
		pr, pw := io.Pipe()
		go func() {
			for range n {
				if _, err := pw.Write([]byte("chunk")); err != nil {
					return
				}
				time.Sleep(gap)
			}
			pw.Close()
		}()
		resp, err := http.Post(srv.URL+path, "application/octet-stream", pr)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	upload := "/api/v1/teams/main/artifacts"
	if code, err := send(upload, 10, timeout/3); err != nil || code != http.StatusNoContent {
		t.Fatalf("steady upload lasting %s (timeout %s): %d, %v; want it through", 10*timeout/3, timeout, code, err)
	}
	if code, err := send(upload, 2, 3*timeout); err == nil && code == http.StatusNoContent {
		t.Fatalf("an upload stalling %s went through (timeout %s)", 3*timeout, timeout)
	}
	if code, err := send("/api/v1/teams/main/pipelines/p/config", 10, timeout/3); err == nil && code == http.StatusNoContent {
		t.Fatalf("an ordinary request read over %s went through (timeout %s)", 10*timeout/3, timeout)
	}
}

// Every route that reads a body answers 413 to one over its own limit,
// sent with a length or chunked, through the real router: a body cut short
// at the limit was a 400 about broken JSON, and two routes answered 400
// whatever the error.
func TestRouteBodiesOverTheirLimit(t *testing.T) {
	huge := func(prefix string) string { return prefix + strings.Repeat("a", 5<<20) }
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/api/v1/teams/main", huge(`{"name":"`)},
		{"PUT", "/api/v1/teams/main/rename", huge(`{"name":"`)},
		{"PUT", "/api/v1/wall", huge(`{"message":"`)},
		{"PUT", pPath + "/rename", huge(`{"name":"`)},
		{"PUT", "/api/v1/teams/main/pipelines/ordering", huge(`["`)},
		{"PUT", pPath + "/ordering", huge(`[{"a":"`)},
		{"PUT", pPath + "/config", huge("#")},
		{"POST", "/api/v1/teams/main/builds", huge(`{"id":"`)},
		{"POST", pPath + "/builds", huge(`{"id":"`)},
		{"POST", rPath + "/check", huge(`{"from":{"v":"`)},
		{"PUT", rPath + "/pin_comment", huge(`{"pin_comment":"`)},
		{"DELETE", rPath + "/cache", huge(`{"version":{"v":"`)},
		{"POST", pPath + "/resource-types/rt/check", huge(`{"from":{"v":"`)},
	} {
		for _, chunked := range []bool{false, true} {
			a := newTestAPI(t)
			var body io.Reader = strings.NewReader(c.body)
			if chunked {
				body = io.MultiReader(body) // unknown length
			}
			req := httptest.NewRequest(c.method, "http://porter.test"+c.path, body)
			if chunked {
				req.ContentLength = -1
			}
			req.Header.Set("Authorization", "Bearer "+a.roleIn(t, "admin"))
			req.Header.Set("Content-Type", "application/json")
			if strings.HasSuffix(c.path, "/config") {
				req.Header.Set("Content-Type", "application/x-yaml")
			}
			rec := httptest.NewRecorder()
			a.Handler().ServeHTTP(rec, req)
			if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "request body too large") {
				t.Errorf("%s %s (chunked=%v): %d %.200s, want 413 saying the body is too large", c.method, c.path, chunked, rec.Code, rec.Body)
			}
			if len(a.store.calls) != 0 {
				t.Errorf("%s %s (chunked=%v): an oversize body changed %v", c.method, c.path, chunked, a.store.calls)
			}
		}
	}
}
