package testenv

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ContainerdSocket is the local cluster's containerd (hack/cluster-lib.sh).
const ContainerdSocket = "/run/porter-cluster/containerd.sock"

// BuildPorterImage builds this tree's cmd/porter into an image as
// hack/images.sh does, under a tag of its own (porter.local/porter:NAME-
// RANDOM), and imports it into the cluster's containerd: a suite that
// changes the sidecar proves it without re-importing the shared :dev image
// under other suites' pods. remove deletes the image again.
func BuildPorterImage(ctx context.Context, dir, name string) (ref string, remove func(context.Context) error, err error) {
	root, err := RepoRoot()
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "porter")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/porter")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("build cmd/porter: %w: %s", err, out)
	}
	ref = "porter.local/porter:" + name + "-" + strings.ToLower(rand.Text()[:8])
	archive := filepath.Join(dir, "porter-image.tar")
	home, err := os.UserHomeDir()
	if err != nil {
		return "", nil, fmt.Errorf("find mkimage: %w", err)
	}
	mkimage := filepath.Join(home, ".cache", "porter", "bin", "mkimage")
	if out, err := exec.CommandContext(ctx, mkimage, "-ref", ref, "-o", archive,
		"-entrypoint", `["/usr/local/bin/porter"]`, bin+":/usr/local/bin/porter").CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("mkimage %s: %w: %s", ref, err, out)
	}
	if out, err := ctr(ctx, "images", "import", archive); err != nil {
		return "", nil, fmt.Errorf("import %s: %w: %s", ref, err, out)
	}
	remove = func(ctx context.Context) error {
		if out, err := ctr(ctx, "images", "rm", ref); err != nil {
			return fmt.Errorf("remove %s: %w: %s", ref, err, out)
		}
		return nil
	}
	return ref, remove, nil
}

func ctr(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, "ctr", append([]string{"-a", ContainerdSocket, "-n", "k8s.io"}, args...)...).CombinedOutput()
}
