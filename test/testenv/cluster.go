package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// ClusterEnvFile is where hack/cluster-up.sh writes the local cluster's
// settings (node IP, MinIO endpoints and credentials).
const ClusterEnvFile = "/var/lib/porter-cluster/cluster.env"

// ClusterEnv reads cluster-up's settings; variables set in the environment
// override the file's.
func ClusterEnv() (map[string]string, error) {
	env := map[string]string{"PORTER_CLUSTER_NODE_IP": "10.245.0.1", "PORTER_CLUSTER_POD_SUBNET": "10.244.0.0/24"}
	f, err := os.Open(ClusterEnvFile)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", ClusterEnvFile, err)
	}
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				env[k] = v
			}
		}
	}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "PORTER_CLUSTER_") {
			env[k] = v
		}
	}
	if env["PORTER_CLUSTER_MINIO_ENDPOINT"] == "" {
		return nil, fmt.Errorf("%w: no MinIO settings (PORTER_CLUSTER_MINIO_* or %s); run `make cluster-up`", ErrNoCluster, ClusterEnvFile)
	}
	return env, nil
}

// FreeAddr returns host:port with a port that was free on host a moment ago.
func FreeAddr(host string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("find a free port on %s: %w", host, err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
