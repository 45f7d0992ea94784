package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// startRegistry runs the distribution registry that hack/build-tools.sh builds
// on a free loopback port, storing in a temp dir, and returns host:port.
func startRegistry(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("PORTER_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(home, ".cache", "porter")
	}
	bin := filepath.Join(cache, "bin", "registry")
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s: %v (run hack/build-tools.sh registry)", bin, err)
		}
		t.Skipf("%s: %v (run hack/build-tools.sh registry)", bin, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(
		"version: 0.1\nlog: {level: error}\nstorage: {filesystem: {rootdirectory: %s}}\nhttp: {addr: %q, secret: test}\n",
		filepath.Join(dir, "data"), addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "serve", config)
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("registry log:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry at %s did not answer in 10s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mkimage builds an archive with hack/tools/mkimage holding one file, and
// returns its path and manifest digest.
func mkimage(t *testing.T, content string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "mkimage")
	if out, err := exec.Command("go", "build", "-o", bin, "../mkimage").CombinedOutput(); err != nil {
		t.Fatalf("building mkimage: %v\n%s", err, out)
	}
	src := filepath.Join(dir, "hello.txt")
	if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "image.tar")
	out, err := exec.Command(bin, "-ref", "porter.local/test:dev", "-o", archive, src+":/hello.txt").Output()
	if err != nil {
		t.Fatalf("mkimage: %v", err)
	}
	return archive, strings.TrimSpace(string(out))
}

func TestPushArchive(t *testing.T) {
	addr := startRegistry(t)
	archive, digest := mkimage(t, "hello "+time.Now().String())
	ctx := context.Background()
	ref := addr + "/porter-test/hello:dev"
	pushes, err := parsePushes([]string{archive + "=" + ref})
	if err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if err := pushAll(ctx, &out, pushes, 2); err != nil {
		t.Fatalf("first push: %v", err)
	}
	if want := ref + "@" + digest + " pushed\n"; out.String() != want {
		t.Errorf("first push printed %q, want %q", out.String(), want)
	}

	// The registry serves the image under the archive's digest, layers included.
	parsed, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(parsed)
	if err != nil {
		t.Fatalf("pulling %s back: %v", ref, err)
	}
	got, err := img.Digest()
	if err != nil || got.String() != digest {
		t.Errorf("registry has %s (err %v), the archive %s", got, err, digest)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatalf("fetching the layer: %v", err)
	}
	rc.Close()

	out.Reset()
	if err := pushAll(ctx, &out, pushes, 2); err != nil {
		t.Fatalf("second push: %v", err)
	}
	if want := ref + "@" + digest + " unchanged\n"; out.String() != want {
		t.Errorf("second push printed %q, want %q", out.String(), want)
	}
}

func TestPushRejectsBadInput(t *testing.T) {
	for _, args := range [][]string{nil, {"image.tar"}, {"=reg:5000/x:y"}, {"image.tar=busybox"}} {
		if _, err := parsePushes(args); err == nil {
			t.Errorf("parsePushes(%q) accepted it", args)
		}
	}

	notTar := filepath.Join(t.TempDir(), "not.tar")
	if err := os.WriteFile(notTar, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	pushes, err := parsePushes([]string{notTar + "=127.0.0.1:1/x:y"})
	if err != nil {
		t.Fatal(err)
	}
	err = pushAll(context.Background(), &bytes.Buffer{}, pushes, 1)
	if err == nil || !strings.Contains(err.Error(), notTar) {
		t.Errorf("pushing a file that is no archive: got %v, want an error naming it", err)
	}
}
