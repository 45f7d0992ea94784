// Package git is the git resource type, in pure Go (go-git): no git binary in
// the image. Versions are commits of one branch: {"ref": "<sha>"}. Smart
// HTTP, ssh and file remotes go through go-git; dumb HTTP servers (static
// files) are read by dumb.go.
package git

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"

	"github.com/porter-ci/porter/pkg/resource"
)

// Source is the resource's source.
type Source struct {
	// URI of the repository: https://, http://, ssh:// or user@host:path.
	URI string `json:"uri"`
	// Branch to track (default: the remote's HEAD branch).
	Branch string `json:"branch"`
	// Paths, if set, limit versions to commits changing a matching file;
	// IgnorePaths drop commits changing only matching files. Patterns are
	// paths, directories or globs (path.Match), relative to the repository.
	Paths       []string `json:"paths"`
	IgnorePaths []string `json:"ignore_paths"`
	// PrivateKey (PEM) authenticates over ssh; host keys are not verified.
	PrivateKey string `json:"private_key"`
	// Username and Password authenticate over http(s).
	Username string `json:"username"`
	Password string `json:"password"`
	// SkipSSLVerification accepts any TLS certificate.
	SkipSSLVerification bool `json:"skip_ssl_verification"`
}

// InParams are the params of a get.
type InParams struct {
	// Depth makes a shallow clone of that many commits (0: full history).
	// When the wanted commit is deeper the clone is redone in full.
	Depth int `json:"depth"`
}

// OutParams are the params of a put.
type OutParams struct {
	// Repository is the directory (an input of the put) whose HEAD is pushed.
	Repository string `json:"repository"`
	// Branch overrides source.branch as the branch pushed to.
	Branch string `json:"branch"`
	// Force pushes even when the branch's head is not an ancestor.
	Force bool `json:"force"`
}

// VersionKey is the version's only key: the commit's full SHA.
const VersionKey = "ref"

// Type is the git resource type.
type Type struct{}

// New returns the git type.
func New() *Type { return &Type{} }

func parseSource(raw []byte) (Source, error) {
	var s Source
	if err := resource.Decode("git source", raw, &s); err != nil {
		return s, err
	}
	if s.URI == "" {
		return s, errors.New("source.uri is required")
	}
	for _, p := range append(append([]string{}, s.Paths...), s.IgnorePaths...) {
		if _, err := path.Match(p, ""); err != nil {
			return s, fmt.Errorf("path pattern %q: %w", p, err)
		}
	}
	return s, nil
}

func (s Source) auth() (transport.AuthMethod, error) {
	ep, err := transport.NewEndpoint(s.URI)
	if err != nil {
		return nil, fmt.Errorf("source.uri %q: %w", s.URI, err)
	}
	switch ep.Protocol {
	case "ssh":
		if s.PrivateKey == "" {
			return nil, nil
		}
		user := ep.User
		if user == "" {
			user = "git"
		}
		keys, err := gitssh.NewPublicKeys(user, []byte(s.PrivateKey), "")
		if err != nil {
			return nil, fmt.Errorf("source.private_key: %w", err)
		}
		// Like Concourse's git resource: host keys are not checked.
		keys.HostKeyCallback = ssh.InsecureIgnoreHostKey()
		return keys, nil
	case "http", "https":
		if s.Username == "" && s.Password == "" {
			return nil, nil
		}
		return &githttp.BasicAuth{Username: s.Username, Password: s.Password}, nil
	default:
		return nil, nil
	}
}

// branch is source.branch, or the branch the remote's HEAD names.
func (s Source) branch(ctx context.Context, auth transport.AuthMethod, dumb *dumbRemote) (string, error) {
	if s.Branch != "" {
		return s.Branch, nil
	}
	if dumb != nil {
		return dumb.headBranch(ctx)
	}
	remote := gogit.NewRemote(nil, &config.RemoteConfig{Name: "origin", URLs: []string{s.URI}})
	refs, err := remote.ListContext(ctx, &gogit.ListOptions{Auth: auth, InsecureSkipTLS: s.SkipSSLVerification})
	if err != nil {
		return "", fmt.Errorf("list the references of %s: %w", s.URI, err)
	}
	for _, r := range refs {
		if r.Name() == plumbing.HEAD && r.Type() == plumbing.SymbolicReference {
			return r.Target().Short(), nil
		}
	}
	return "", fmt.Errorf("%s has no HEAD branch: set source.branch", s.URI)
}

// clone clones branch of the source into dir (bare for check), from a dumb
// HTTP server when dumb is set. withTrees false allows a dumb clone to fetch
// commits only.
func (s Source) clone(ctx context.Context, dir string, bare bool, branch string, depth int, auth transport.AuthMethod, dumb *dumbRemote, withTrees bool) (*gogit.Repository, error) {
	if dumb != nil {
		return dumb.clone(ctx, dir, bare, branch, depth, withTrees)
	}
	repo, err := gogit.PlainCloneContext(ctx, dir, bare, &gogit.CloneOptions{
		URL:             s.URI,
		Auth:            auth,
		ReferenceName:   plumbing.NewBranchReferenceName(branch),
		SingleBranch:    true,
		Depth:           depth,
		Tags:            gogit.NoTags,
		InsecureSkipTLS: s.SkipSSLVerification,
	})
	if err != nil {
		return nil, fmt.Errorf("clone branch %s of %s: %w", branch, s.URI, err)
	}
	return repo, nil
}

// missingBranch reports whether a clone failed because the branch (or any
// commit at all) is not there yet.
func missingBranch(err error) bool {
	return errors.Is(err, transport.ErrEmptyRemoteRepository) ||
		errors.Is(err, plumbing.ErrReferenceNotFound) ||
		strings.Contains(err.Error(), "couldn't find remote ref")
}

// Check emits the commits of the branch (first parents) from the given one
// to the head, oldest first; only the head without a version or when the
// given commit is no longer on the branch. Paths filters apply; the given
// commit is always kept.
func (t *Type) Check(ctx context.Context, req resource.CheckRequest, log io.Writer) ([]resource.Version, error) {
	s, err := parseSource(req.Source)
	if err != nil {
		return nil, err
	}
	auth, err := s.auth()
	if err != nil {
		return nil, err
	}
	dumb, err := s.dumbHTTP(ctx)
	if err != nil {
		return nil, err
	}
	branch, err := s.branch(ctx, auth, dumb)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "git-check-")
	if err != nil {
		return nil, fmt.Errorf("create a clone directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	var since plumbing.Hash
	if ref := req.Version[VersionKey]; ref != "" {
		since = plumbing.NewHash(ref)
	}
	// Only the head is wanted on a first check without path filters: one commit is enough.
	depth := 0
	if since.IsZero() && len(s.Paths) == 0 && len(s.IgnorePaths) == 0 {
		depth = 1
	}
	filtered := len(s.Paths) > 0 || len(s.IgnorePaths) > 0
	repo, err := s.clone(ctx, tmp, true, branch, depth, auth, dumb, filtered)
	if err != nil {
		if missingBranch(err) {
			resource.Logf(log, "branch %s of %s does not exist (yet): no versions", branch, s.URI)
			return []resource.Version{}, nil
		}
		return nil, err
	}
	head, err := repo.Reference(plumbing.NewBranchReferenceName(branch), true)
	if err != nil {
		return nil, fmt.Errorf("read the head of %s: %w", branch, err)
	}
	var newestFirst []plumbing.Hash
	found := false
	c, err := repo.CommitObject(head.Hash())
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", head.Hash(), err)
	}
	for {
		if c.Hash == since {
			found = true
			newestFirst = append(newestFirst, c.Hash)
			break
		}
		ok, err := s.relevant(ctx, c)
		if err != nil {
			return nil, err
		}
		if ok {
			newestFirst = append(newestFirst, c.Hash)
			if since.IsZero() {
				break
			}
		}
		if c.NumParents() == 0 {
			break
		}
		parent, err := c.Parent(0)
		if err != nil {
			return nil, fmt.Errorf("read the parent of %s: %w", c.Hash, err)
		}
		c = parent
	}
	if !since.IsZero() && !found {
		resource.Logf(log, "commit %s is not on branch %s any more: emitting the latest", since, branch)
		newestFirst = newestFirst[:min(1, len(newestFirst))]
	}
	versions := make([]resource.Version, 0, len(newestFirst))
	for i := len(newestFirst) - 1; i >= 0; i-- {
		versions = append(versions, resource.Version{VersionKey: newestFirst[i].String()})
	}
	return versions, nil
}

// relevant reports whether commit c passes the paths and ignore_paths filters,
// judged by the files it changes against its first parent.
func (s Source) relevant(ctx context.Context, c *object.Commit) (bool, error) {
	if len(s.Paths) == 0 && len(s.IgnorePaths) == 0 {
		return true, nil
	}
	tree, err := c.Tree()
	if err != nil {
		return false, fmt.Errorf("read the tree of %s: %w", c.Hash, err)
	}
	var parentTree *object.Tree
	if c.NumParents() > 0 {
		parent, err := c.Parent(0)
		if err != nil {
			return false, fmt.Errorf("read the parent of %s: %w", c.Hash, err)
		}
		if parentTree, err = parent.Tree(); err != nil {
			return false, fmt.Errorf("read the tree of %s: %w", parent.Hash, err)
		}
	}
	changes, err := object.DiffTreeWithOptions(ctx, parentTree, tree, nil)
	if err != nil {
		return false, fmt.Errorf("diff %s with its parent: %w", c.Hash, err)
	}
	matchPaths, notIgnored := len(s.Paths) == 0, len(s.IgnorePaths) == 0
	for _, ch := range changes {
		for _, name := range []string{ch.From.Name, ch.To.Name} {
			if name == "" {
				continue
			}
			if !matchPaths && matchAny(s.Paths, name) {
				matchPaths = true
			}
			if !notIgnored && !matchAny(s.IgnorePaths, name) {
				notIgnored = true
			}
		}
	}
	return matchPaths && notIgnored, nil
}

// matchAny reports whether file matches a pattern: the same path, a file under
// that directory, or a glob matching the file or one of its directories.
func matchAny(patterns []string, file string) bool {
	for _, p := range patterns {
		p = strings.TrimSuffix(strings.TrimPrefix(p, "./"), "/")
		if file == p || strings.HasPrefix(file, p+"/") {
			return true
		}
		for prefix := file; prefix != "." && prefix != "/" && prefix != ""; prefix = path.Dir(prefix) {
			if ok, _ := path.Match(p, prefix); ok {
				return true
			}
		}
	}
	return false
}

// In clones the branch into dir with the given commit checked out (the branch
// reset to it) and writes .git/ref, .git/short_ref, .git/commit_message and
// .git/committer.
func (t *Type) In(ctx context.Context, dir string, req resource.InRequest, log io.Writer) (resource.Response, error) {
	s, err := parseSource(req.Source)
	if err != nil {
		return resource.Response{}, err
	}
	var p InParams
	if err := resource.Decode("git get params", req.Params, &p); err != nil {
		return resource.Response{}, err
	}
	if p.Depth < 0 {
		return resource.Response{}, fmt.Errorf("params.depth %d is negative", p.Depth)
	}
	ref := req.Version[VersionKey]
	if ref == "" {
		return resource.Response{}, fmt.Errorf("version %v has no %q", req.Version, VersionKey)
	}
	hash := plumbing.NewHash(ref)
	auth, err := s.auth()
	if err != nil {
		return resource.Response{}, err
	}
	dumb, err := s.dumbHTTP(ctx)
	if err != nil {
		return resource.Response{}, err
	}
	branch, err := s.branch(ctx, auth, dumb)
	if err != nil {
		return resource.Response{}, err
	}
	if dumb != nil {
		resource.Logf(log, "%s speaks git's dumb HTTP protocol: fetching its files", s.URI)
	}
	resource.Logf(log, "cloning %s (branch %s) at %s", s.URI, branch, ref)
	repo, commit, err := s.cloneAt(ctx, dir, branch, hash, p.Depth, auth, dumb)
	if err != nil && p.Depth > 0 {
		resource.Logf(log, "commit %s is not within depth %d: cloning the whole history", ref, p.Depth)
		if err := emptyDir(dir); err != nil {
			return resource.Response{}, err
		}
		repo, commit, err = s.cloneAt(ctx, dir, branch, hash, 0, auth, dumb)
	}
	if err != nil {
		return resource.Response{}, err
	}
	wt, err := repo.Worktree()
	if err != nil {
		return resource.Response{}, fmt.Errorf("open the worktree: %w", err)
	}
	if err := wt.Reset(&gogit.ResetOptions{Commit: hash, Mode: gogit.HardReset}); err != nil {
		return resource.Response{}, fmt.Errorf("check out %s: %w", ref, err)
	}
	files := map[string]string{
		"ref":            ref + "\n",
		"short_ref":      ref[:min(7, len(ref))] + "\n",
		"commit_message": commit.Message,
		"committer":      commit.Committer.Email + "\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, ".git", name), []byte(content), 0o644); err != nil {
			return resource.Response{}, fmt.Errorf("write .git/%s: %w", name, err)
		}
	}
	return resource.Response{Version: resource.Version{VersionKey: ref}, Metadata: metadata(commit, branch)}, nil
}

func (s Source) cloneAt(ctx context.Context, dir, branch string, hash plumbing.Hash, depth int, auth transport.AuthMethod, dumb *dumbRemote) (*gogit.Repository, *object.Commit, error) {
	repo, err := s.clone(ctx, dir, false, branch, depth, auth, dumb, true)
	if err != nil {
		return nil, nil, err
	}
	commit, err := repo.CommitObject(hash)
	if err != nil {
		return nil, nil, fmt.Errorf("commit %s is not on branch %s of %s (gone after a force push?): %w", hash, branch, s.URI, err)
	}
	return repo, commit, nil
}

func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("empty %s: %w", dir, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("empty %s: %w", dir, err)
		}
	}
	return nil
}

const dateFormat = "2006-01-02 15:04:05 -0700"

func metadata(c *object.Commit, branch string) []resource.MetadataField {
	md := []resource.MetadataField{
		{Name: "commit", Value: c.Hash.String()},
		{Name: "author", Value: c.Author.Name},
		{Name: "author_date", Value: c.Author.When.Format(dateFormat)},
	}
	if c.Committer.Name != c.Author.Name || c.Committer.Email != c.Author.Email {
		md = append(md, resource.MetadataField{Name: "committer", Value: c.Committer.Name})
	}
	md = append(md,
		resource.MetadataField{Name: "committer_date", Value: c.Committer.When.Format(dateFormat)},
		resource.MetadataField{Name: "branch", Value: branch},
		resource.MetadataField{Name: "message", Value: strings.TrimRight(c.Message, "\n")},
	)
	return md
}

// pushRef is a local reference out points at the commit to push, so a
// detached HEAD pushes as well as a branch.
const pushRef = plumbing.ReferenceName("refs/porter/put")

// Out pushes the HEAD of params.repository to the branch.
func (t *Type) Out(ctx context.Context, dir string, req resource.OutRequest, log io.Writer) (resource.Response, error) {
	s, err := parseSource(req.Source)
	if err != nil {
		return resource.Response{}, err
	}
	var p OutParams
	if err := resource.Decode("git put params", req.Params, &p); err != nil {
		return resource.Response{}, err
	}
	if p.Repository == "" {
		return resource.Response{}, errors.New("params.repository is required: the input directory to push")
	}
	repoDir, err := resource.JoinInside(dir, p.Repository)
	if err != nil {
		return resource.Response{}, fmt.Errorf("params.repository: %w", err)
	}
	branch := p.Branch
	if branch == "" {
		branch = s.Branch
	}
	if branch == "" {
		return resource.Response{}, errors.New("no branch to push to: set source.branch or params.branch")
	}
	auth, err := s.auth()
	if err != nil {
		return resource.Response{}, err
	}
	// go-git would fail on a dumb server with a bare "unexpected EOF".
	if dumb, err := s.dumbHTTP(ctx); err != nil {
		return resource.Response{}, err
	} else if dumb != nil {
		return resource.Response{}, fmt.Errorf("push to branch %s of %s: %w", branch, s.URI, errDumbPush)
	}
	repo, err := gogit.PlainOpen(repoDir)
	if err != nil {
		return resource.Response{}, fmt.Errorf("open the repository %s: %w", p.Repository, err)
	}
	head, err := repo.Head()
	if err != nil {
		return resource.Response{}, fmt.Errorf("read HEAD of %s: %w", p.Repository, err)
	}
	commit, err := repo.CommitObject(head.Hash())
	if err != nil {
		return resource.Response{}, fmt.Errorf("read commit %s: %w", head.Hash(), err)
	}
	if err := repo.Storer.SetReference(plumbing.NewHashReference(pushRef, head.Hash())); err != nil {
		return resource.Response{}, fmt.Errorf("mark the commit to push: %w", err)
	}
	defer repo.Storer.RemoveReference(pushRef)

	remote, err := repo.CreateRemoteAnonymous(&config.RemoteConfig{Name: "anonymous", URLs: []string{s.URI}})
	if err != nil {
		return resource.Response{}, fmt.Errorf("remote %s: %w", s.URI, err)
	}
	spec := config.RefSpec(fmt.Sprintf("%s:%s", pushRef, plumbing.NewBranchReferenceName(branch)))
	if p.Force {
		spec = "+" + spec
	}
	resource.Logf(log, "pushing %s to branch %s of %s", head.Hash(), branch, s.URI)
	err = remote.PushContext(ctx, &gogit.PushOptions{
		RemoteName:      "anonymous",
		RefSpecs:        []config.RefSpec{spec},
		Auth:            auth,
		Force:           p.Force,
		InsecureSkipTLS: s.SkipSSLVerification,
	})
	switch {
	case errors.Is(err, gogit.NoErrAlreadyUpToDate):
		resource.Logf(log, "branch %s is already at %s", branch, head.Hash())
	case err != nil:
		return resource.Response{}, fmt.Errorf("push %s to branch %s of %s: %w", head.Hash(), branch, s.URI, err)
	}
	return resource.Response{Version: resource.Version{VersionKey: head.Hash().String()}, Metadata: metadata(commit, branch)}, nil
}
