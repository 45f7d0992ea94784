package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// RegistryAddr returns host:port of the local cluster's image registry
// (PORTER_CLUSTER_REGISTRY, which hack/cluster-up.sh writes to cluster.env):
// plain HTTP and read-only, the same address from the host, from pods and for
// the node's containerd, so a pod can run <addr>/<repo>@sha256:<digest>
// pushed from a test through RegistryPushAddr. It checks that the registry
// answers; errors that mean "no registry here" wrap ErrNoCluster.
func RegistryAddr(ctx context.Context) (string, error) {
	return registryAddr(ctx, "PORTER_CLUSTER_REGISTRY", "")
}

// RegistryPushAddr returns host:port of the local cluster's registry where
// the host pushes (PORTER_CLUSTER_REGISTRY_PUSH: the read-write instance on
// the node's loopback, which pods cannot reach). An image pushed as
// <push>/<repo> is pulled as <RegistryAddr>/<repo>. A cluster from before
// the read-only instance has one address for both.
func RegistryPushAddr(ctx context.Context) (string, error) {
	return registryAddr(ctx, "PORTER_CLUSTER_REGISTRY_PUSH", "PORTER_CLUSTER_REGISTRY")
}

func registryAddr(ctx context.Context, key, fallback string) (string, error) {
	env, err := ClusterEnv()
	if err != nil {
		return "", err
	}
	addr := env[key]
	if addr == "" && fallback != "" {
		key, addr = fallback, env[fallback]
	}
	if addr == "" {
		return "", fmt.Errorf("%w: %s is set neither in the environment nor in %s; run `make cluster-up`", ErrNoCluster, key, ClusterEnvFile)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("%s=%q is not host:port: %w", key, addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/", nil)
	if err != nil {
		return "", fmt.Errorf("registry %s: %w", addr, err)
	}
	// The registry is on this host: never through a proxy from the environment.
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("%w: registry at %s does not answer: %w", ErrNoCluster, addr, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("registry at %s: GET /v2/ answered %s", addr, resp.Status)
	}
	return addr, nil
}

// TB is the part of testing.TB that Registry uses; Ginkgo's GinkgoT() has it.
type TB interface {
	Helper()
	Skipf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Registry returns RegistryAddr for a test. Without a cluster the test is
// skipped, unless CI is set: then, as for any other error, it fails.
func Registry(t TB) string {
	t.Helper()
	addr, err := RegistryAddr(context.Background())
	switch {
	case err == nil:
		return addr
	case errors.Is(err, ErrNoCluster) && os.Getenv("CI") == "":
		t.Skipf("%v", err)
	default:
		t.Fatalf("local cluster registry: %v", err)
	}
	return ""
}
