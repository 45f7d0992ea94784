// Command gitserverd is the image porter.local/git-server:dev (hack/images.sh
// git-server): git's own `git http-backend` behind net/http/cgi in a pod of
// the local cluster, a git server as a team would run one. Repositories are
// created through POST /_repos/NAME?branch=B&webhook=URL (the test's
// set-up, what a forge's UI would do); every push runs the repository's
// post-receive hook, which is this same binary: it POSTs to each webhook
// URL, as a forge calls Concourse's check webhook.
//
//	gitserverd [-listen :8080] [-root /srv/git]
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cgi"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// gitCore is where Debian's git keeps http-backend and the commands it runs.
const gitCore = "/usr/lib/git-core"

// webhooksFile lists a repository's webhook URLs, one a line, in its
// directory.
const webhooksFile = "porter-webhooks"

func main() {
	// Git runs hooks/post-receive, a link to this binary.
	if filepath.Base(os.Args[0]) == "post-receive" {
		os.Exit(postReceive(os.Stdin, os.Stderr))
	}
	listen := flag.String("listen", ":8080", "address to serve on")
	root := flag.String("root", "/srv/git", "directory of the bare repositories (NAME.git)")
	flag.Parse()
	if err := serve(*listen, *root); err != nil {
		slog.Error("gitserverd", "err", err)
		os.Exit(1)
	}
}

func serve(listen, root string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary for the hooks: %w", err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", root, err)
	}
	backend := &cgi.Handler{
		Path: filepath.Join(gitCore, "git-http-backend"),
		Root: "/",
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "PATH=" + gitCore, "HOME=" + root},
		// http-backend's stderr (and the hook's, through receive-pack) in the pod's log.
		Stderr: os.Stderr,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_health", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("POST /_repos/{name}", func(w http.ResponseWriter, r *http.Request) {
		name, branch := r.PathValue("name"), r.URL.Query().Get("branch")
		if err := createRepo(r.Context(), root, self, name, branch, r.URL.Query()["webhook"]); err != nil {
			slog.Error("create repository", "name", name, "err", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		slog.Info("created repository", "name", name, "branch", branch)
		w.WriteHeader(http.StatusCreated)
	})
	mux.Handle("/", backend)
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	slog.Info("serving git", "listen", listen, "root", root)
	return srv.ListenAndServe()
}

var repoName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// createRepo makes root/NAME.git, a bare repository whose HEAD names branch,
// open to anonymous pushes, with the post-receive hook calling webhooks.
func createRepo(ctx context.Context, root, self, name, branch string, webhooks []string) error {
	if !repoName.MatchString(name) || strings.Contains(name, "..") {
		return fmt.Errorf("bad repository name %q", name)
	}
	if branch == "" {
		branch = "main"
	}
	for _, u := range webhooks {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("webhook %q is not an http(s) URL", u)
		}
	}
	dir := filepath.Join(root, name+".git")
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("repository %s exists", name)
	}
	steps := [][]string{
		{"init", "--quiet", "--bare", "--initial-branch=" + branch, dir},
		{"-C", dir, "config", "http.receivepack", "true"},
		// No gc after a push: nothing in the background of the figures.
		{"-C", dir, "config", "gc.auto", "0"},
	}
	for _, args := range steps {
		cmd := exec.CommandContext(ctx, filepath.Join(gitCore, "git"), args...)
		cmd.Env = []string{"PATH=" + gitCore, "HOME=" + root}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, webhooksFile), []byte(strings.Join(webhooks, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("write the webhooks: %w", err)
	}
	hooks := filepath.Join(dir, "hooks")
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		return fmt.Errorf("create the hooks directory: %w", err)
	}
	if err := os.Symlink(self, filepath.Join(hooks, "post-receive")); err != nil {
		return fmt.Errorf("install the post-receive hook: %w", err)
	}
	return nil
}

// postReceive runs in the repository's directory after a push: it calls
// every webhook and says how each answered (git shows it to the pusher as
// "remote: …"). The push has happened whatever it returns.
func postReceive(stdin io.Reader, out io.Writer) int {
	_, _ = io.Copy(io.Discard, stdin) // the updated refs: every webhook is called whatever they are
	f, err := os.Open(webhooksFile)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(out, "post-receive: %v\n", err)
		return 1
	}
	defer f.Close()
	client := &http.Client{Timeout: 10 * time.Second}
	code := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		u := strings.TrimSpace(sc.Text())
		if u == "" {
			continue
		}
		start := time.Now()
		resp, err := client.Post(u, "", nil)
		if err != nil {
			// Said without the URL: its query holds the webhook's token.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			fmt.Fprintf(out, "post-receive: webhook: %v\n", err)
			code = 1
			continue
		}
		resp.Body.Close()
		fmt.Fprintf(out, "post-receive: webhook answered %s in %s\n", resp.Status, time.Since(start).Round(time.Millisecond))
		if resp.StatusCode >= 300 {
			code = 1
		}
	}
	return code
}
