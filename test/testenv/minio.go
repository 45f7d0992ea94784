// Package testenv starts the real services Porter's tests run against, in
// local containers (testcontainers-go), and gives them back as configs.
package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/porter-ci/porter/pkg/blobstore"
)

// MinIOImage is built locally by hack/images-docker.sh (FROM scratch plus the
// MinIO binary from hack/build-tools.sh): no registry is needed.
const MinIOImage = "porter/minio:dev"

// MinIO is a running MinIO server in a container.
type MinIO struct {
	Endpoint string // 127.0.0.1:port
	// BridgeEndpoint is the container's own address on Docker's bridge
	// (ip:9000), reachable from this host without docker-proxy, the
	// userland proxy that copies every byte of the published port.
	BridgeEndpoint string
	AccessKey      string
	SecretKey      string

	container testcontainers.Container
}

// StartMinIO builds the image if needed (hack/images-docker.sh minio) and
// starts a MinIO container on a random local port. The caller must call
// Terminate (Ryuk, testcontainers' reaper, is disabled: its image would have
// to come from a registry).
func StartMinIO(ctx context.Context) (*MinIO, error) {
	if err := localDocker(); err != nil {
		return nil, err
	}
	if err := ensureImage(ctx, "minio"); err != nil {
		return nil, err
	}
	access := "porter"
	secret := randomHex(16)
	const port = "9000/tcp"
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        MinIOImage,
			Cmd:          []string{"server", "/data", "--address", ":9000", "--console-address", ":9001", "--quiet"},
			ExposedPorts: []string{port},
			Env: map[string]string{
				"MINIO_ROOT_USER":     access,
				"MINIO_ROOT_PASSWORD": secret,
				// FROM scratch has no /tmp nor $HOME.
				"HOME":                   "/data",
				"MINIO_BROWSER":          "off",
				"MINIO_UPDATE":           "off",
				"MINIO_CI_CD":            "1",
				"MINIO_API_REQUESTS_MAX": "10000",
			},
			Labels: map[string]string{"dev.porter.testenv": "minio"},
			WaitingFor: wait.ForHTTP("/minio/health/ready").WithPort(port).
				WithStartupTimeout(60 * time.Second),
		},
		Started: true,
	})
	if err != nil {
		if c != nil {
			_ = c.Terminate(context.WithoutCancel(ctx))
		}
		return nil, fmt.Errorf("start minio container: %w", err)
	}
	m := &MinIO{AccessKey: access, SecretKey: secret, container: c}
	mapped, err := c.MappedPort(ctx, port)
	if err != nil {
		_ = m.Terminate(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("minio port: %w", err)
	}
	m.Endpoint = "127.0.0.1:" + mapped.Port()
	if ip, err := c.ContainerIP(ctx); err == nil && ip != "" {
		m.BridgeEndpoint = net.JoinHostPort(ip, "9000")
	}
	return m, nil
}

// Config is a minio-driver blobstore config for bucket on this server.
func (m *MinIO) Config(bucket string) blobstore.Config {
	return blobstore.Config{
		Driver:    blobstore.DriverMinio,
		Endpoint:  m.Endpoint,
		Bucket:    bucket,
		Region:    "us-east-1",
		AccessKey: m.AccessKey,
		SecretKey: m.SecretKey,
	}
}

// NewBucket creates a bucket with a fresh random name and returns its name.
func (m *MinIO) NewBucket(ctx context.Context) (string, error) {
	name := "test-" + randomHex(8)
	s, err := blobstore.NewMinio(m.Config(name))
	if err != nil {
		return "", err
	}
	if err := s.EnsureBucket(ctx); err != nil {
		return "", err
	}
	return name, nil
}

// Pid is the MinIO server's process ID on this host: benchmarks read its
// CPU time from /proc.
func (m *MinIO) Pid(ctx context.Context) (int, error) {
	st, err := m.container.State(ctx)
	if err != nil {
		return 0, fmt.Errorf("minio container state: %w", err)
	}
	return st.Pid, nil
}

// Terminate stops and removes the container.
func (m *MinIO) Terminate(ctx context.Context) error {
	if m == nil || m.container == nil {
		return nil
	}
	if err := m.container.Terminate(ctx); err != nil {
		return fmt.Errorf("terminate minio container: %w", err)
	}
	return nil
}

// localDocker configures testcontainers for the local engine before it
// reads its config for the first time: no Ryuk (its image would come from a
// registry), and ports reached on 127.0.0.1 (inside a container
// testcontainers would otherwise guess the default gateway).
func localDocker() error {
	for k, v := range map[string]string{
		"TESTCONTAINERS_RYUK_DISABLED": "true",
		"TESTCONTAINERS_HOST_OVERRIDE": "127.0.0.1",
	} {
		if os.Getenv(k) != "" {
			continue
		}
		if err := os.Setenv(k, v); err != nil {
			return fmt.Errorf("configure testcontainers: %w", err)
		}
	}
	return nil
}

// ensureImage runs hack/images-docker.sh NAME from the repository root; the
// script returns at once when the image is up to date.
func ensureImage(ctx context.Context, name string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "images-docker.sh"), name)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hack/images-docker.sh %s: %w\n%s", name, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// RepoRoot finds the Porter checkout above the working directory (go test
// runs in the package's directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/porter-ci/porter\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.mod of github.com/porter-ci/porter above the working directory")
		}
		dir = parent
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// WithMinIOBucket starts a MinIO, creates a bucket, runs fn with the
// bucket's blobstore config and terminates the MinIO afterwards, whatever fn
// returned (for programs; suites use StartMinIO with DeferCleanup).
func WithMinIOBucket(ctx context.Context, fn func(m *MinIO, cfg blobstore.Config) error) (err error) {
	m, err := StartMinIO(ctx)
	if err != nil {
		return err
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if terr := m.Terminate(tctx); terr != nil && err == nil {
			err = terr
		}
	}()
	bucket, err := m.NewBucket(ctx)
	if err != nil {
		return err
	}
	return fn(m, m.Config(bucket))
}

// MinIOStore starts a real MinIO (Docker) for t with a fresh bucket and
// opens it. Without Docker the test is skipped, except in CI.
func MinIOStore(t testing.TB) blobstore.Store {
	t.Helper()
	ctx := context.Background()
	m, err := StartMinIO(ctx)
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("no MinIO (run `make docker-up`): %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Terminate(context.Background()) })
	bucket, err := m.NewBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	store, err := blobstore.Open(ctx, m.Config(bucket))
	if err != nil {
		t.Fatal(err)
	}
	return store
}
