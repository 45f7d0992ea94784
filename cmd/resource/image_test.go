package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/uuid"

	"github.com/porter-ci/porter/test/testenv"
	"github.com/porter-ci/porter/test/testenv/gitserver"
)

// runInCluster runs /opt/resource/<script> of image in a pod of the local
// cluster with request on stdin and returns its stdout. The images come from
// `hack/images.sh resources`.
func runInCluster(t *testing.T, image, request string, args ...string) string {
	t.Helper()
	kubectl := os.Getenv("PORTER_KUBECTL")
	if kubectl == "" {
		kubectl = filepath.Join(os.Getenv("HOME"), ".cache", "porter", "bin", "kubectl")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pod := "resource-image-test-" + uuid.NewString()[:8]
	cmdArgs := append([]string{"--kubeconfig", testenv.KubeconfigPath(), "--namespace", "default",
		"run", pod, "-i", "--rm", "--quiet", "--restart=Never", "--image", image, "--image-pull-policy=Never",
		"--command", "--"}, args...)
	cmd := exec.CommandContext(ctx, kubectl, cmdArgs...)
	cmd.Stdin = strings.NewReader(request)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl run %s %v: %v\nstdout: %s\nstderr: %s", image, args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// The images run in the cluster: the git image clones from the host's git
// server through the node IP, with no git binary in it.
func TestImagesInCluster(t *testing.T) {
	ctx := context.Background()
	if _, err := testenv.AdminConfig(ctx, testenv.KubeconfigPath()); err != nil {
		if errors.Is(err, testenv.ErrNoCluster) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	env, err := testenv.ClusterEnv()
	if err != nil {
		t.Skip(err)
	}
	srv, err := gitserver.New(env["PORTER_CLUSTER_NODE_IP"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := srv.CreateRepo(ctx, "app", "main"); err != nil {
		t.Fatal(err)
	}
	sha, err := srv.Commit(ctx, "app", "main", map[string]string{"README": "hello"}, "first")
	if err != nil {
		t.Fatal(err)
	}
	source := fmt.Sprintf(`{"uri":%q,"branch":"main"}`, srv.URL("app"))

	out := runInCluster(t, "porter.local/resource-git:dev", `{"source":`+source+`}`, "/opt/resource/check")
	if strings.TrimSpace(out) != `[{"ref":"`+sha+`"}]` {
		t.Fatalf("git check in a pod = %q, want %s", out, sha)
	}
	out = runInCluster(t, "porter.local/resource-git:dev", `{"source":`+source+`,"version":{"ref":"`+sha+`"}}`, "/opt/resource/in", "/tmp/repo")
	var resp struct {
		Version  map[string]string   `json:"version"`
		Metadata []map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil || resp.Version["ref"] != sha || len(resp.Metadata) == 0 {
		t.Fatalf("git in in a pod = %q (%v)", out, err)
	}

	// registry-image against a real registry on the host, over plain http.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	regSrv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: 10 * time.Second}
	go regSrv.Serve(ln)
	t.Cleanup(func() { regSrv.Close() })
	repo := fmt.Sprintf("%s:%d/app", env["PORTER_CLUSTER_NODE_IP"], ln.Addr().(*net.TCPAddr).Port)
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(repo+":v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	out = runInCluster(t, "porter.local/resource-registry-image:dev", `{"source":{"repository":"`+repo+`","tag":"v1","insecure":true}}`, "/opt/resource/check")
	if strings.TrimSpace(out) != `[{"digest":"`+digest.String()+`"}]` {
		t.Fatalf("registry-image check in a pod = %q, want %s", out, digest)
	}

	out = runInCluster(t, "porter.local/resource-mock:dev", `{"source":{"versions":["a","b"]}}`, "/opt/resource/check")
	if strings.TrimSpace(out) != `[{"version":"b"}]` {
		t.Fatalf("mock check in a pod = %q", out)
	}
	out = runInCluster(t, "porter.local/resource-time:dev", `{"source":{"interval":"1m","location":"Europe/Paris"}}`, "/opt/resource/check")
	if !strings.Contains(out, `"time":"`) {
		t.Fatalf("time check in a pod = %q", out)
	}
}
