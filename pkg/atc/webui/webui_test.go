package webui

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func serve(t *testing.T, method, target string) *http.Response {
	t.Helper()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"errors":["api"]}`)
	})
	rec := httptest.NewRecorder()
	Wrap(api, "http://porter.test").ServeHTTP(rec, httptest.NewRequest(method, "http://porter.test"+target, nil))
	return rec.Result()
}

func TestPagesAnswerTheApp(t *testing.T) {
	for _, p := range []string{"/", "/dashboard", "/dashboard?search=team:main", "/hd", "/login?fly_port=1234", "/fly_success?fly_port=1", "/builds/12",
		"/teams/main/pipelines/hello", "/teams/main/pipelines/hello/jobs/j/builds/3", "/teams/main/pipelines/hello/resources/r"} {
		res := serve(t, http.MethodGet, p)
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `<div id="app">`) {
			t.Errorf("GET %s: %d %.80q, want the app's index.html", p, res.StatusCode, body)
		}
		if cc := res.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q, want no-cache", p, cc)
		}
	}
}

// Browsers ask for /favicon.ico by themselves: it is an icon, not a 404.
func TestFavicon(t *testing.T) {
	res := serve(t, http.MethodGet, "/favicon.ico")
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "image/x-icon" || len(body) < 22 ||
		string(body[:4]) != "\x00\x00\x01\x00" {
		t.Fatalf("GET /favicon.ico: %d %s %.8q", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
}

func TestAPIPathsPassThrough(t *testing.T) {
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/v1/nope"}, {"GET", "/sky/nope"}, {"POST", "/teams/main/pipelines/x"}, {"GET", "/elsewhere"},
	} {
		res := serve(t, c.method, c.path)
		if res.StatusCode != http.StatusNotFound || res.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d %s, want the API's JSON 404", c.method, c.path, res.StatusCode, res.Header.Get("Content-Type"))
		}
	}
}

func TestAssetsAreCachedForever(t *testing.T) {
	index, err := fs.ReadFile(dist, "dist/index.html")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`/assets/[A-Za-z0-9._-]+`).FindAllString(string(index), -1)
	if len(refs) != 2 {
		t.Fatalf("index.html names %v, want one script and one stylesheet", refs)
	}
	for _, ref := range refs {
		if !regexp.MustCompile(`-[A-Z0-9]{8}\.(js|css)$`).MatchString(ref) {
			t.Errorf("asset %s has no content hash in its name", ref)
		}
		res := serve(t, http.MethodGet, ref)
		if res.StatusCode != http.StatusOK || !strings.Contains(res.Header.Get("Cache-Control"), "immutable") {
			t.Errorf("GET %s: %d Cache-Control %q, want 200 and immutable", ref, res.StatusCode, res.Header.Get("Cache-Control"))
		}
	}
	if res := serve(t, http.MethodGet, "/assets/missing-ABCDEFGH.js"); res.StatusCode != http.StatusNotFound {
		t.Errorf("missing asset: %d, want 404", res.StatusCode)
	}
	if res := serve(t, http.MethodGet, "/assets/../index.html"); res.StatusCode != http.StatusNotFound {
		t.Errorf("/assets/../index.html: %d, want 404", res.StatusCode)
	}
}

// TestBundleIsFresh fails when web/'s sources changed since the committed
// bundle was built (`make web` rebuilds it). It needs no node: the hash is
// the one web/build.mjs records.
func TestBundleIsFresh(t *testing.T) {
	web := filepath.Join("..", "..", "..", "web")
	files := []string{"package.json", "package-lock.json", "build.mjs"}
	err := filepath.WalkDir(filepath.Join(web, "src"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(web, p)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	h := sha256.New()
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(web, f))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		_, _ = io.WriteString(h, f+"\n"+hex.EncodeToString(sum[:])+"\n")
	}
	want, err := fs.ReadFile(dist, "dist/sources.sha256")
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != strings.TrimSpace(string(want)) {
		hint := "run `make web` and commit pkg/atc/webui/dist"
		if _, err := exec.LookPath("node"); err != nil {
			hint += " (on a machine with node)"
		}
		t.Fatalf("the embedded UI was built from other sources than web/ holds (%s != %s): %s", got, strings.TrimSpace(string(want)), hint)
	}
}

// The pages answer only this server's own names, as the API does: under a
// name of an attacker's (DNS rebinding) they would run with its origin.
func TestPagesRefuseAForeignHost(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := Wrap(api, "https://ci.example.com")
	for _, c := range []struct {
		host string
		want int
	}{
		{"ci.example.com", http.StatusOK}, {"CI.Example.com.", http.StatusOK}, {"127.0.0.1:8080", http.StatusOK}, {"localhost", http.StatusOK},
		{"evil.example.net", http.StatusBadRequest}, {"ci.example.com.evil.net", http.StatusBadRequest},
	} {
		for _, p := range []string{"/", "/teams/main/pipelines/p", "/builds/1", "/login"} {
			req := httptest.NewRequest(http.MethodGet, p, nil)
			req.Host = c.host
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != c.want {
				t.Errorf("GET %s with Host %q: %d %.80q, want %d", p, c.host, rec.Code, rec.Body, c.want)
			}
			if c.want != http.StatusOK && !strings.Contains(rec.Body.String(), "is not this server") {
				t.Errorf("GET %s with Host %q: %q does not say why", p, c.host, rec.Body)
			}
		}
	}
}
