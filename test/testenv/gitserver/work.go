package gitserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Work is a working repository on the host that commits and pushes to one
// branch of a remote (a path or a URL) with the host's git, as a developer
// does: Server.Commit and the in-cluster server's pushes go through it, and
// a benchmark can commit first and time the push alone.
type Work struct {
	dir, remote, branch string
}

// NewWork makes a working repository in dir (which must exist and be empty)
// at the head of branch of remote, or on an unborn branch when the remote
// does not have it yet.
func NewWork(ctx context.Context, dir, remote, branch string) (*Work, error) {
	w := &Work{dir: dir, remote: remote, branch: branch}
	if _, err := runGit(ctx, dir, "init", "--quiet", "--initial-branch="+branch); err != nil {
		return nil, err
	}
	if _, err := runGit(ctx, dir, "fetch", "--quiet", remote, "refs/heads/"+branch+":refs/remotes/origin/"+branch); err == nil {
		if _, err := runGit(ctx, dir, "reset", "--quiet", "--hard", "refs/remotes/origin/"+branch); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Commit commits files (path to content; an empty content deletes the file)
// on the working branch, without pushing, and returns the commit's SHA.
func (w *Work) Commit(ctx context.Context, files map[string]string, message string) (string, error) {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(w.dir, filepath.FromSlash(p))
		if !strings.HasPrefix(full, w.dir+string(filepath.Separator)) {
			return "", fmt.Errorf("git server: path %q leaves the repository", p)
		}
		if files[p] == "" {
			if err := os.Remove(full); err != nil && !errors.Is(err, os.ErrNotExist) {
				return "", fmt.Errorf("git server: %w", err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", fmt.Errorf("git server: %w", err)
		}
		if err := os.WriteFile(full, []byte(files[p]), 0o644); err != nil {
			return "", fmt.Errorf("git server: %w", err)
		}
	}
	if _, err := runGit(ctx, w.dir, "add", "--all"); err != nil {
		return "", err
	}
	if _, err := runGit(ctx, w.dir, "commit", "--quiet", "--allow-empty", "-m", message); err != nil {
		return "", err
	}
	return runGit(ctx, w.dir, "rev-parse", "HEAD")
}

// Push pushes the working branch to the remote's branch and returns what
// the remote said (its hooks' output, "remote: …").
func (w *Work) Push(ctx context.Context) (string, error) {
	return runGit(ctx, w.dir, "push", "--quiet", w.remote, "HEAD:refs/heads/"+w.branch)
}

// runGit runs the host's git in dir with a fixed identity and no user
// config, and returns its trimmed output (stdout, then stderr when it
// succeeded: push reports the remote's words there).
func runGit(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Porter Test", "GIT_AUTHOR_EMAIL=test@porter.local",
		"GIT_COMMITTER_NAME=Porter Test", "GIT_COMMITTER_EMAIL=test@porter.local",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git server: git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	if args[0] == "push" {
		return strings.TrimSpace(stdout.String() + stderr.String()), nil
	}
	return strings.TrimSpace(stdout.String()), nil
}
