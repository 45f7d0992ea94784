package atc

import (
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestByteSizeFlag(t *testing.T) {
	var c LimitsConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	limitFlags(fs, &c)
	if c.MaxArtifactUpload != 10<<30 || c.MaxRequestBody != 8<<20 {
		t.Fatalf("defaults %d, %d", c.MaxArtifactUpload, c.MaxRequestBody)
	}
	if err := fs.Parse([]string{"--max-artifact-upload", "500Mi", "--max-request-body", "1000"}); err != nil {
		t.Fatal(err)
	}
	if c.MaxArtifactUpload != 500<<20 || c.MaxRequestBody != 1000 {
		t.Fatalf("parsed %d, %d", c.MaxArtifactUpload, c.MaxRequestBody)
	}
	for _, bad := range []string{"0", "-1", "lots", "1.5"} {
		if err := fs.Parse([]string{"--max-artifact-upload", bad}); err == nil {
			t.Errorf("--max-artifact-upload %s accepted", bad)
		}
	}
}

// TestBodyLimits runs a handler that reads its body, as the API's do,
// behind limitBodies on a real HTTP server.
func TestBodyLimits(t *testing.T) {
	s := &Server{cfg: Config{Limits: LimitsConfig{MaxArtifactUpload: 1000, MaxRequestBody: 100}.withDefaults()}}
	read := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			writeError(w, http.StatusBadRequest, err)
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
