package atcclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/pkg/atcclient/atcfake"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/events"
)

func newClient(t *testing.T, url string) *atcclient.Client {
	t.Helper()
	c, err := atcclient.New(url)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// makeTree writes a small tree with the kinds of entries artifacts keep.
func makeTree(t *testing.T, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "src", "pkg"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "empty"), 0o750))
	must(os.WriteFile(filepath.Join(dir, "README"), []byte("hello\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "src", "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	big := bytes.Repeat([]byte("porter "), 300_000) // a couple of MiB, several zstd blocks
	must(os.WriteFile(filepath.Join(dir, "src", "pkg", "big.txt"), big, 0o600))
	must(os.Symlink("../README", filepath.Join(dir, "src", "readme-link")))
}

type entry struct {
	Mode fs.FileMode
	Data string
}

// snapshot describes a tree: names, types and permissions, contents and
// symlink targets.
func snapshot(t *testing.T, dir string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := entry{Mode: fi.Mode()}
		switch {
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.Data = string(data)
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Data, err = os.Readlink(p)
			if err != nil {
				return err
			}
		}
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func extractStream(t *testing.T, data []byte, dir string) {
	t.Helper()
	dec, err := zstd.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	if err := blobstore.Extract(context.Background(), dec, dir); err != nil {
		t.Fatalf("the uploaded stream is not a tar.zst of the directory: %v", err)
	}
}

func TestUploadArtifactStreamsTarZstd(t *testing.T) {
	srv := atcfake.New(t)
	c := newClient(t, srv.URL)
	src := t.TempDir()
	makeTree(t, src)

	var last atomic.Int64
	ref, err := c.UploadArtifact(context.Background(), src, func(n int64) { last.Store(n) })
	if err != nil {
		t.Fatal(err)
	}
	ups := srv.Uploads()
	if len(ups) != 1 || ups[0].ContentType != atcclient.UploadContentType {
		t.Fatalf("uploads = %+v, want one with Content-Type %s", ups, atcclient.UploadContentType)
	}
	if ref != ups[0].Ref {
		t.Fatalf("ref = %+v, server stored %+v", ref, ups[0].Ref)
	}
	if last.Load() != ref.Size {
		t.Errorf("progress ended at %d bytes, the stream has %d", last.Load(), ref.Size)
	}
	data, _ := srv.Artifact(ref.Key)
	got := t.TempDir()
	extractStream(t, data, got)
	if want, have := snapshot(t, src), snapshot(t, got); !reflect.DeepEqual(want, have) {
		t.Fatalf("extracted upload differs:\nwant %v\n got %v", want, have)
	}
}

func TestUploadArtifactRefusesWrongDigest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"key":"artifacts/x.tar.zst","digest":"sha256:0000","size":1}`)
	}))
	defer srv.Close()
	_, err := newClient(t, srv.URL).UploadArtifact(context.Background(), t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("err = %v, want a digest error", err)
	}
}

func TestUploadArtifactErrorAnswerStopsTheStream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Answer without reading the body: the client must not hang.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		fmt.Fprint(w, `{"error":"artifact too large"}`)
	}))
	defer srv.Close()
	src := t.TempDir()
	makeTree(t, src)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := newClient(t, srv.URL).UploadArtifact(ctx, src, nil)
	var se *atcclient.StatusError
	if !errors.As(err, &se) {
		// The transport may report the broken write instead of the answer;
		// either way the upload must fail, promptly.
		if err == nil || ctx.Err() != nil {
			t.Fatalf("err = %v, want a prompt failure", err)
		}
		return
	}
	if se.StatusCode != http.StatusRequestEntityTooLarge || se.Message != "artifact too large" {
		t.Fatalf("err = %#v", se)
	}
}

func TestUploadArtifactNotADirectory(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := newClient(t, "http://127.0.0.1:1").UploadArtifact(context.Background(), f, nil)
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("err = %v", err)
	}
}

func TestDownloadArtifact(t *testing.T) {
	srv := atcfake.New(t)
	c := newClient(t, srv.URL)
	src := t.TempDir()
	makeTree(t, src)
	ref, err := c.UploadArtifact(context.Background(), src, nil)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("into a new directory", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "a", "b")
		if err := c.DownloadArtifact(context.Background(), ref, dst); err != nil {
			t.Fatal(err)
		}
		if want, have := snapshot(t, src), snapshot(t, dst); !reflect.DeepEqual(want, have) {
			t.Fatalf("downloaded tree differs:\nwant %v\n got %v", want, have)
		}
		assertNoStaging(t, filepath.Dir(dst))
	})

	t.Run("into an existing directory", func(t *testing.T) {
		dst := t.TempDir()
		if err := os.WriteFile(filepath.Join(dst, "keep.txt"), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, "src"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, "src", "run.sh"), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := c.DownloadArtifact(context.Background(), ref, dst); err != nil {
			t.Fatal(err)
		}
		want := snapshot(t, src)
		want["keep.txt"] = entry{Mode: 0o644, Data: "mine"}
		if have := snapshot(t, dst); !reflect.DeepEqual(want, have) {
			t.Fatalf("merged tree differs:\nwant %v\n got %v", want, have)
		}
	})

	t.Run("digest mismatch is refused and leaves the directory alone", func(t *testing.T) {
		dst := t.TempDir()
		bad := ref
		bad.Digest = "sha256:" + strings.Repeat("ab", 32)
		err := c.DownloadArtifact(context.Background(), bad, dst)
		if err == nil || !strings.Contains(err.Error(), "digest mismatch") {
			t.Fatalf("err = %v, want a digest mismatch", err)
		}
		if entries, _ := os.ReadDir(dst); len(entries) != 0 {
			t.Fatalf("%s has %d entries after a refused download", dst, len(entries))
		}
		assertNoStaging(t, filepath.Dir(dst))
	})

	t.Run("a ref without a sha256 digest is refused", func(t *testing.T) {
		bad := ref
		bad.Digest = ""
		if err := c.DownloadArtifact(context.Background(), bad, t.TempDir()); err == nil {
			t.Fatal("no error")
		}
	})

	t.Run("unknown artifact", func(t *testing.T) {
		bad := ref
		bad.Key = "artifacts/nope.tar.zst"
		err := c.DownloadArtifact(context.Background(), bad, t.TempDir())
		if !atcclient.IsNotFound(err) {
			t.Fatalf("err = %v, want a 404", err)
		}
	})
}

func assertNoStaging(t *testing.T, parent string) {
	t.Helper()
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".download-") {
			t.Errorf("staging directory %s left behind", e.Name())
		}
	}
}

func TestStatusErrorCarriesServerMessage(t *testing.T) {
	srv := atcfake.New(t)
	srv.OnCreate = func(api.CreateBuildRequest) (*atcfake.Build, error) {
		return nil, errors.New("task config: missing 'platform'")
	}
	_, err := newClient(t, srv.URL).CreateBuild(context.Background(), api.CreateBuildRequest{})
	const want = "create build: 400 Bad Request: task config: missing 'platform'"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	var se *atcclient.StatusError
	if !errors.As(err, &se) || se.StatusCode != 400 {
		t.Fatalf("err = %#v, want a StatusError with 400", err)
	}
}

func TestStatusErrorWithoutJSON(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway from proxy", http.StatusBadGateway)
	}))
	defer srv.Close()
	_, err := newClient(t, srv.URL).Builds(context.Background())
	const want = "list builds: 502 Bad Gateway: bad gateway from proxy"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

func TestBuildsBuildAbort(t *testing.T) {
	srv := atcfake.New(t)
	c := newClient(t, srv.URL)
	srv.AddBuild(&atcfake.Build{Build: api.Build{ID: 7, Name: "one-off", Status: api.StatusStarted}})
	srv.AddBuild(&atcfake.Build{Build: api.Build{ID: 9, Name: "one-off", Status: api.StatusSucceeded}})
	ctx := context.Background()
	bs, err := c.Builds(ctx)
	if err != nil || len(bs) != 2 || bs[0].ID != 9 {
		t.Fatalf("Builds = %+v, %v", bs, err)
	}
	b, err := c.Build(ctx, 7)
	if err != nil || b.Status != api.StatusStarted {
		t.Fatalf("Build = %+v, %v", b, err)
	}
	if err := c.AbortBuild(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if got := srv.Aborts(); !reflect.DeepEqual(got, []int64{7}) {
		t.Fatalf("aborts = %v", got)
	}
	if _, err := c.Build(ctx, 8); !atcclient.IsNotFound(err) {
		t.Fatalf("err = %v, want 404", err)
	}
	if got, want := c.BuildURL(7), srv.URL+"/api/v1/builds/7"; got != want {
		t.Fatalf("BuildURL = %s, want %s", got, want)
	}
}

func logEvents(n int) []events.Event {
	var evs []events.Event
	for i := range n {
		evs = append(evs, events.Log{Origin: events.Origin{ID: "task", Source: "stdout"}, Payload: fmt.Sprintf("line %d\n", i)})
	}
	return evs
}

// readAll reads a stream to its end and returns the log payloads.
func readAll(t *testing.T, s *atcclient.EventStream) string {
	t.Helper()
	var out strings.Builder
	for {
		_, env, err := s.Next()
		if errors.Is(err, io.EOF) {
			return out.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		ev, err := env.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if l, ok := ev.(events.Log); ok {
			out.WriteString(l.Payload)
		}
	}
}

func TestEventsReconnectsOnCutStream(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build atcfake.Build
	}{
		{"ended without end event", atcfake.Build{CutAfter: 3}},
		{"connection broken", atcfake.Build{BreakAfter: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := atcfake.New(t)
			b := tc.build
			b.Events = logEvents(6)
			id := srv.AddBuild(&b)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := newClient(t, srv.URL).Events(ctx, id, "")
			if err != nil {
				t.Fatal(err)
			}
			got := readAll(t, s)
			want := "line 0\nline 1\nline 2\nline 3\nline 4\nline 5\n"
			if got != want {
				t.Fatalf("logs = %q, want %q (no line lost or repeated)", got, want)
			}
			if ids := srv.LastEventIDs(); !reflect.DeepEqual(ids, []string{"", "3"}) {
				t.Fatalf("Last-Event-IDs = %q, want a reconnect from 3", ids)
			}
			if _, _, err := s.Next(); !errors.Is(err, io.EOF) {
				t.Fatalf("Next after the end = %v, want io.EOF", err)
			}
		})
	}
}

func TestEventsFromID(t *testing.T) {
	srv := atcfake.New(t)
	id := srv.AddBuild(&atcfake.Build{Events: logEvents(4)})
	s, err := newClient(t, srv.URL).Events(context.Background(), id, "2")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s); got != "line 2\nline 3\n" {
		t.Fatalf("logs = %q", got)
	}
}

func TestEventsUnknownBuild(t *testing.T) {
	srv := atcfake.New(t)
	_, err := newClient(t, srv.URL).Events(context.Background(), 404, "")
	if !atcclient.IsNotFound(err) {
		t.Fatalf("err = %v, want 404", err)
	}
}

func TestEventsReconnectStopsWithTheContext(t *testing.T) {
	if testing.Short() {
		t.Skip("waits through reconnect attempts")
	}
	srv := atcfake.New(t)
	id := srv.AddBuild(&atcfake.Build{Events: logEvents(3), CutAfter: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := newClient(t, srv.URL).Events(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	srv.CloseClientConnections()
	srv.Close()
	_, _, err = s.Next()
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("err = %v, want a failure", err)
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"127.0.0.1:8080", "ftp://x", "http://", "::"} {
		if _, err := atcclient.New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	c, err := atcclient.New("http://atc.example:8080/")
	if err != nil || c.URL() != "http://atc.example:8080" {
		t.Fatalf("New = %v, %v", c, err)
	}
}
