// Package gitserver is the real git servers the suites and benchmarks push
// to and step pods fetch from: the host's `git http-backend` (Server, also
// serving git's dumb HTTP protocol) and git's http-backend in a pod of the
// local cluster whose post-receive hook calls webhooks (InCluster).
package gitserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
)

// Server is a real smart-HTTP git server for tests: the host's
// `git http-backend` behind net/http/cgi, serving bare repositories from a
// temporary directory. It listens on every interface, so step pods reach it
// through the host's IP (the cluster's node IP). Pushes are allowed. The same
// repositories are also served read-only over git's dumb HTTP protocol
// (DumbURL).
//
//	srv, err := gitserver.New(env.Cluster["PORTER_CLUSTER_NODE_IP"])
//	t.Cleanup(func() { srv.Close() })       // or DeferCleanup(srv.Close)
//	srv.CreateRepo(ctx, "app", "main")
//	sha, err := srv.Commit(ctx, "app", "main", map[string]string{"README": "hi"}, "first")
//	uri := srv.URL("app")                   // http://NODE_IP:PORT/app.git
type Server struct {
	root      string // bare repositories, NAME.git
	work      string // scratch clones for Commit
	advertise string // host in URL
	port      int
	srv       *http.Server
	done      chan error
	auth      atomic.Pointer[[2]string] // username, password; nil: anonymous
}

// New starts a server; URL names advertiseHost (e.g. the cluster's
// node IP; empty means 127.0.0.1). Close stops it and removes its repositories.
func New(advertiseHost string) (*Server, error) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("git server: the host's git is needed: %w", err)
	}
	execPath, err := exec.Command(gitBin, "--exec-path").Output()
	if err != nil {
		return nil, fmt.Errorf("git server: git --exec-path: %w", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		return nil, fmt.Errorf("git server: %w", err)
	}
	if advertiseHost == "" {
		advertiseHost = "127.0.0.1"
	}
	dir, err := os.MkdirTemp("", "porter-gitserver-")
	if err != nil {
		return nil, fmt.Errorf("git server: %w", err)
	}
	s := &Server{root: filepath.Join(dir, "repos"), work: filepath.Join(dir, "work"), advertise: advertiseHost, done: make(chan error, 1)}
	for _, d := range []string{s.root, s.work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, errors.Join(fmt.Errorf("git server: %w", err), os.RemoveAll(dir))
		}
	}
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("git server: listen: %w", err), os.RemoveAll(dir))
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	backendHandler := &cgi.Handler{
		Path: backend,
		Root: "/",
		Env:  []string{"GIT_PROJECT_ROOT=" + s.root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	// The same repositories as static files, as a dumb HTTP server serves them.
	dumbHandler := http.StripPrefix(dumbPrefix, http.FileServer(http.Dir(s.root)))
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if want := s.auth.Load(); want != nil {
				user, pass, ok := r.BasicAuth()
				if !ok || user != want[0] || pass != want[1] {
					w.Header().Set("WWW-Authenticate", `Basic realm="porter-gitserver"`)
					http.Error(w, "authentication required", http.StatusUnauthorized)
					return
				}
			}
			if strings.HasPrefix(r.URL.Path, dumbPrefix+"/") {
				dumbHandler.ServeHTTP(w, r)
				return
			}
			backendHandler.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// RequireBasicAuth makes every request need username and password (HTTP basic
// auth), to test credentials; empty username switches it off again.
func (s *Server) RequireBasicAuth(username, password string) {
	if username == "" {
		s.auth.Store(nil)
		return
	}
	s.auth.Store(&[2]string{username, password})
}

// URL is the clone URL of repository name for pods (through the advertised host).
func (s *Server) URL(name string) string {
	return fmt.Sprintf("http://%s/%s.git", net.JoinHostPort(s.advertise, fmt.Sprint(s.port)), name)
}

// dumbPrefix is where the server serves its repositories' files as they are:
// git's dumb HTTP protocol (read-only).
const dumbPrefix = "/dumb"

// DumbURL is the clone URL of repository name for pods over git's dumb HTTP
// protocol: the bare repository's files, which every push keeps current for
// it (receive.updateServerInfo).
func (s *Server) DumbURL(name string) string {
	return fmt.Sprintf("http://%s%s/%s.git", net.JoinHostPort(s.advertise, fmt.Sprint(s.port)), dumbPrefix, name)
}

// LocalDumbURL is DumbURL through the loopback address.
func (s *Server) LocalDumbURL(name string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s/%s.git", s.port, dumbPrefix, name)
}

// LocalURL is the clone URL of repository name through the loopback address.
func (s *Server) LocalURL(name string) string {
	return fmt.Sprintf("http://127.0.0.1:%d/%s.git", s.port, name)
}

// Dir is the bare repository of name on disk.
func (s *Server) Dir(name string) string { return filepath.Join(s.root, name+".git") }

// Close stops the server and removes its repositories.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if serveErr := <-s.done; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return errors.Join(err, os.RemoveAll(filepath.Dir(s.root)))
}

var repoName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)

// CreateRepo creates an empty bare repository whose HEAD names branch.
func (s *Server) CreateRepo(ctx context.Context, name, branch string) error {
	if !repoName.MatchString(name) || strings.Contains(name, "..") {
		return fmt.Errorf("git server: bad repository name %q", name)
	}
	dir := s.Dir(name)
	if _, err := runGit(ctx, "", "init", "--quiet", "--bare", "--initial-branch="+branch, dir); err != nil {
		return err
	}
	// Anonymous pushes through http-backend need receive-pack switched on;
	// the dumb protocol's info/refs and objects/info/packs are rewritten on
	// every push.
	for _, kv := range [][2]string{{"http.receivepack", "true"}, {"receive.updateServerInfo", "true"}} {
		if _, err := runGit(ctx, dir, "config", kv[0], kv[1]); err != nil {
			return err
		}
	}
	_, err := runGit(ctx, dir, "update-server-info")
	return err
}

// Commit commits files (path to content; an empty content deletes the file)
// on top of branch (created from nothing when it does not exist yet), pushes
// it, and returns the new commit's SHA.
func (s *Server) Commit(ctx context.Context, name, branch string, files map[string]string, message string) (string, error) {
	work, err := os.MkdirTemp(s.work, "commit-")
	if err != nil {
		return "", fmt.Errorf("git server: %w", err)
	}
	defer os.RemoveAll(work)
	w, err := NewWork(ctx, work, s.Dir(name), branch)
	if err != nil {
		return "", err
	}
	sha, err := w.Commit(ctx, files, message)
	if err != nil {
		return "", err
	}
	if _, err := w.Push(ctx); err != nil {
		return "", err
	}
	return sha, nil
}

// Head returns the SHA branch points at.
func (s *Server) Head(ctx context.Context, name, branch string) (string, error) {
	return runGit(ctx, s.Dir(name), "rev-parse", "--verify", "refs/heads/"+branch)
}

// File returns the content of path at the head of branch.
func (s *Server) File(ctx context.Context, name, branch, path string) (string, error) {
	return runGit(ctx, s.Dir(name), "show", "refs/heads/"+branch+":"+path)
}

// Log returns the SHAs of branch's first-parent history, newest first.
func (s *Server) Log(ctx context.Context, name, branch string) ([]string, error) {
	out, err := runGit(ctx, s.Dir(name), "rev-list", "--first-parent", "refs/heads/"+branch)
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}
