package atc

import (
	"context"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestByteSizeFlag(t *testing.T) {
	var c LimitsConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	limitFlags(fs, &c)
	if c.MaxArtifactUpload != 10<<30 || c.MaxRequestBody != 8<<20 || c.GRPC.Unsynced != 32<<20 {
		t.Fatalf("defaults %d, %d, %d", c.MaxArtifactUpload, c.MaxRequestBody, c.GRPC.Unsynced)
	}
	if err := fs.Parse([]string{"--max-artifact-upload", "500Mi", "--max-request-body", "1000", "--grpc-max-unsynced-bytes", "64Mi"}); err != nil {
		t.Fatal(err)
	}
	if c.MaxArtifactUpload != 500<<20 || c.MaxRequestBody != 1000 || c.GRPC.Unsynced != 64<<20 {
		t.Fatalf("parsed %d, %d, %d", c.MaxArtifactUpload, c.MaxRequestBody, c.GRPC.Unsynced)
	}
	for _, bad := range []string{"0", "-1", "lots", "1.5"} {
		for _, name := range []string{"--max-artifact-upload", "--grpc-max-unsynced-bytes"} {
			if err := fs.Parse([]string{name, bad}); err == nil {
				t.Errorf("%s %s accepted", name, bad)
			}
		}
	}
}

func TestUploadLimitFlags(t *testing.T) {
	var c LimitsConfig
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	limitFlags(fs, &c)
	if c.Upload.MaxInflated != 1<<30 || c.Upload.MaxEntries != 500_000 {
		t.Fatalf("defaults %+v", c.Upload)
	}
	if err := fs.Parse([]string{"--max-artifact-upload-inflated", "4Gi", "--max-artifact-upload-entries", "1000"}); err != nil {
		t.Fatal(err)
	}
	if c.Upload.MaxInflated != 4<<30 || c.Upload.MaxEntries != 1000 {
		t.Fatalf("parsed %+v", c.Upload)
	}
	for _, name := range []string{"--max-artifact-upload-inflated", "--max-artifact-upload-entries"} {
		for _, bad := range []string{"0", "-1", "lots"} {
			if err := fs.Parse([]string{name, bad}); err == nil {
				t.Errorf("%s %s accepted", name, bad)
			}
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

// TestUploadReadTimeoutBoundsStalls: on the API's real server, an upload
// that keeps sending goes on past --http-read-timeout, one that stalls
// longer than it is cut off, and so is an ordinary request read too slowly.
func TestUploadReadTimeoutBoundsStalls(t *testing.T) {
	const timeout = 300 * time.Millisecond
	s := &Server{cfg: Config{Limits: LimitsConfig{HTTPReadTimeout: timeout}.withDefaults()}}
	read := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = s.apiServer(context.Background(), read)
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
