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
	remove, err = importImage(ctx, dir, ref, "-entrypoint", `["/usr/local/bin/porter"]`, bin+":/usr/local/bin/porter")
	if err != nil {
		return "", nil, err
	}
	return ref, remove, nil
}

// BuildResourceImage builds this tree's cmd/resource into the image of base
// resource type typ as hack/images.sh does (for mock with the busybox
// userland hack/images.sh keeps in its cache, when it is there), under a
// tag of its own (porter.local/resource-TYPE:NAME-RANDOM), and imports it
// into the cluster's containerd: pass it to a server as a
// --base-resource-type to prove a change to the resource types without
// re-importing the shared :dev images. remove deletes the image again.
func BuildResourceImage(ctx context.Context, dir, typ, name string) (ref string, remove func(context.Context) error, err error) {
	root, err := RepoRoot()
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "resource")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/resource")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("build cmd/resource: %w: %s", err, out)
	}
	ref = "porter.local/resource-" + typ + ":" + name + "-" + strings.ToLower(rand.Text()[:8])
	args := []string{"-env", "PORTER_RESOURCE_TYPE=" + typ, "-env", "PORTER_RESOURCE_IMAGE=" + ref}
	if typ == "mock" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", nil, fmt.Errorf("find the busybox userland: %w", err)
		}
		if busybox := filepath.Join(home, ".cache", "porter", "images", "rootfs", "busybox"); isDir(busybox) {
			args = append(args, busybox+":/")
		}
	}
	args = append(args, bin+":/opt/resource/resource", filepath.Join(root, "cmd", "resource", "links")+":/opt/resource")
	remove, err = importImage(ctx, dir, ref, args...)
	if err != nil {
		return "", nil, err
	}
	return ref, remove, nil
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// importImage writes image ref with hack/tools/mkimage (args: its flags
// and SRC:/DST files) and imports it into the cluster's containerd.
func importImage(ctx context.Context, dir, ref string, args ...string) (remove func(context.Context) error, err error) {
	archive := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, fmt.Errorf("find mkimage: %w", err)
	}
	mkimage := filepath.Join(home, ".cache", "porter", "bin", "mkimage")
	if out, err := exec.CommandContext(ctx, mkimage, append([]string{"-ref", ref, "-o", archive}, args...)...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mkimage %s: %w: %s", ref, err, out)
	}
	if out, err := ctr(ctx, "images", "import", archive); err != nil {
		return nil, fmt.Errorf("import %s: %w: %s", ref, err, out)
	}
	return func(ctx context.Context) error {
		if out, err := ctr(ctx, "images", "rm", ref); err != nil {
			return fmt.Errorf("remove %s: %w: %s", ref, err, out)
		}
		return nil
	}, nil
}

func ctr(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, "ctr", append([]string{"-a", ContainerdSocket, "-n", "k8s.io"}, args...)...).CombinedOutput()
}
