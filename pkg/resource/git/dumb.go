package git

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/format/objfile"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage"
)

// go-git speaks only git's smart HTTP protocol. A dumb HTTP server (a bare
// repository's files served as they are, after `git update-server-info`) is
// read here the way git's own http-walker reads it: info/refs lists the
// references, and every object is fetched loose (objects/ab/cdef…) or, when
// the server has no such file, with the pack whose index (objects/info/packs,
// objects/pack/*.idx) lists it. The objects land in the go-git repository's
// storage, so the rest of the resource works on it as on a clone.

// errDumbPush is why a put to a dumb HTTP server fails.
var errDumbPush = errors.New("the server speaks git's dumb HTTP protocol (static files), which cannot receive a push: push over smart HTTP (git http-backend) or ssh")

// smartAdvertisement is the content type of a smart server's info/refs.
const smartAdvertisement = "application/x-git-upload-pack-advertisement"

// dumbRemote is a repository served over dumb HTTP.
type dumbRemote struct {
	base     string // the repository's URL, without a trailing slash
	client   *http.Client
	username string
	password string
	refs     map[plumbing.ReferenceName]plumbing.Hash

	packs     []string // objects/info/packs, read on first need
	packsRead bool
	indexes   map[string]*idxfile.MemoryIndex // by pack name
	fetched   map[string]bool                 // packs already in the storage
}

// dumbHTTP asks an http(s) source's server for its references the way a
// smart client does. A smart server answers with its advertisement: nil is
// returned and go-git does the work. A dumb server answers with the plain
// info/refs file, which is kept. Errors other than an unreadable answer
// (e.g. 404, 401) also return nil, so go-git reports them as it always has.
func (s Source) dumbHTTP(ctx context.Context) (*dumbRemote, error) {
	if !strings.HasPrefix(s.URI, "http://") && !strings.HasPrefix(s.URI, "https://") {
		return nil, nil
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if s.SkipSSLVerification {
		transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the source asks for it
	}
	d := &dumbRemote{
		base:     strings.TrimSuffix(s.URI, "/"),
		client:   &http.Client{Transport: transport},
		username: s.Username,
		password: s.Password,
		indexes:  map[string]*idxfile.MemoryIndex{},
		fetched:  map[string]bool{},
	}
	resp, err := d.request(ctx, "info/refs?service=git-upload-pack")
	if err != nil {
		return nil, fmt.Errorf("ask %s for its references: %w", s.URI, err)
	}
	defer resp.Body.Close()
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != http.StatusOK || media == smartAdvertisement {
		return nil, nil
	}
	// Follow a redirect as git does: the repository is where info/refs was found.
	if final := resp.Request.URL; final != nil {
		u := *final
		u.RawQuery = ""
		d.base = strings.TrimSuffix(strings.TrimSuffix(u.String(), "/info/refs"), "/")
	}
	if d.refs, err = parseInfoRefs(resp.Body); err != nil {
		return nil, fmt.Errorf("%s answered info/refs with neither git's smart advertisement nor a dumb server's file (content type %q): %w",
			s.URI, resp.Header.Get("Content-Type"), err)
	}
	return d, nil
}

// parseInfoRefs reads info/refs as update-server-info writes it: one
// "<sha>\t<name>" a line, peeled tags as "<name>^{}".
func parseInfoRefs(r io.Reader) (map[plumbing.ReferenceName]plumbing.Hash, error) {
	refs := map[plumbing.ReferenceName]plumbing.Hash{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		sha, name, ok := strings.Cut(line, "\t")
		if !ok || !plumbing.IsHash(sha) || name == "" {
			return nil, fmt.Errorf("line %q is not \"<sha>\\t<reference>\"", truncate(line, 80))
		}
		if strings.HasSuffix(name, "^{}") {
			continue
		}
		refs[plumbing.ReferenceName(name)] = plumbing.NewHash(sha)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read info/refs: %w", err)
	}
	return refs, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// errNotFound is a 404 from the dumb server.
var errNotFound = errors.New("not found")

// request GETs path under the repository; any status is returned as it is.
func (d *dumbRemote) request(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+"/"+path, nil)
	if err != nil {
		return nil, err
	}
	if d.username != "" || d.password != "" {
		req.SetBasicAuth(d.username, d.password)
	}
	return d.client.Do(req)
}

// get GETs path and returns its body; a 404 is errNotFound.
func (d *dumbRemote) get(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := d.request(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("get %s/%s: %w", d.base, path, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return resp.Body, nil
	case http.StatusNotFound:
		resp.Body.Close()
		return nil, fmt.Errorf("get %s/%s: %w", d.base, path, errNotFound)
	default:
		resp.Body.Close()
		return nil, fmt.Errorf("get %s/%s: %s", d.base, path, resp.Status)
	}
}

// headBranch is the branch the repository's HEAD file names.
func (d *dumbRemote) headBranch(ctx context.Context) (string, error) {
	body, err := d.get(ctx, "HEAD")
	if err != nil {
		return "", fmt.Errorf("read the HEAD of %s: %w", d.base, err)
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, 4096))
	if err != nil {
		return "", fmt.Errorf("read the HEAD of %s: %w", d.base, err)
	}
	target, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "ref: ")
	if !ok || !strings.HasPrefix(target, "refs/heads/") {
		return "", fmt.Errorf("%s has no HEAD branch: set source.branch", d.base)
	}
	return plumbing.ReferenceName(target).Short(), nil
}

// clone makes a repository in dir as go-git's clone of branch would (origin,
// the branch, its remote-tracking reference, HEAD on the branch) from the
// dumb server. withTrees false fetches commits only, enough for a check
// without path filters.
func (d *dumbRemote) clone(ctx context.Context, dir string, bare bool, branch string, depth int, withTrees bool) (*gogit.Repository, error) {
	name := plumbing.NewBranchReferenceName(branch)
	head, ok := d.refs[name]
	if !ok {
		return nil, fmt.Errorf("branch %s of %s: %w", branch, d.base, plumbing.ErrReferenceNotFound)
	}
	repo, err := gogit.PlainInitWithOptions(dir, &gogit.PlainInitOptions{
		Bare:        bare,
		InitOptions: gogit.InitOptions{DefaultBranch: name},
	})
	if err != nil {
		return nil, fmt.Errorf("create a repository in %s: %w", dir, err)
	}
	// A new repository has none of the packs an earlier clone fetched.
	d.fetched = map[string]bool{}
	remoteRef := plumbing.NewRemoteReferenceName("origin", branch)
	if _, err := repo.CreateRemote(&config.RemoteConfig{
		Name:  "origin",
		URLs:  []string{d.base},
		Fetch: []config.RefSpec{config.RefSpec(fmt.Sprintf("+%s:%s", name, remoteRef))},
	}); err != nil {
		return nil, fmt.Errorf("add the remote origin: %w", err)
	}
	if err := d.fetch(ctx, repo.Storer, head, depth, withTrees); err != nil {
		return nil, fmt.Errorf("fetch branch %s of %s: %w", branch, d.base, err)
	}
	for _, ref := range []*plumbing.Reference{
		plumbing.NewHashReference(name, head),
		plumbing.NewHashReference(remoteRef, head),
		plumbing.NewSymbolicReference(plumbing.HEAD, name),
	} {
		if err := repo.Storer.SetReference(ref); err != nil {
			return nil, fmt.Errorf("set %s: %w", ref.Name(), err)
		}
	}
	if err := repo.CreateBranch(&config.Branch{Name: branch, Remote: "origin", Merge: name}); err != nil {
		return nil, fmt.Errorf("configure branch %s: %w", branch, err)
	}
	return repo, nil
}

// want is an object to fetch; depth counts commits from the head (1).
type want struct {
	hash  plumbing.Hash
	typ   plumbing.ObjectType
	depth int
}

// fetch stores every object reachable from head that st lacks: commits (to
// depth commits when depth > 0, the last ones marked shallow) and, with
// withTrees, their trees and blobs. Submodules' commits are not followed.
func (d *dumbRemote) fetch(ctx context.Context, st storage.Storer, head plumbing.Hash, depth int, withTrees bool) error {
	queue := []want{{hash: head, typ: plumbing.CommitObject, depth: 1}}
	seen := map[plumbing.Hash]bool{}
	var shallow []plumbing.Hash
	for len(queue) > 0 {
		w := queue[0]
		queue = queue[1:]
		if seen[w.hash] {
			continue
		}
		seen[w.hash] = true
		if err := d.ensure(ctx, st, w.hash); err != nil {
			return err
		}
		if w.typ == plumbing.BlobObject {
			continue
		}
		obj, err := st.EncodedObject(plumbing.AnyObject, w.hash)
		if err != nil {
			return fmt.Errorf("read object %s: %w", w.hash, err)
		}
		switch obj.Type() {
		case plumbing.CommitObject:
			c, err := object.DecodeCommit(st, obj)
			if err != nil {
				return fmt.Errorf("decode commit %s: %w", w.hash, err)
			}
			if withTrees {
				queue = append(queue, want{hash: c.TreeHash, typ: plumbing.TreeObject})
			}
			if depth > 0 && w.depth >= depth && len(c.ParentHashes) > 0 {
				shallow = append(shallow, c.Hash)
				continue
			}
			for _, p := range c.ParentHashes {
				queue = append(queue, want{hash: p, typ: plumbing.CommitObject, depth: w.depth + 1})
			}
		case plumbing.TreeObject:
			t, err := object.DecodeTree(st, obj)
			if err != nil {
				return fmt.Errorf("decode tree %s: %w", w.hash, err)
			}
			for _, e := range t.Entries {
				switch e.Mode {
				case filemode.Submodule:
				case filemode.Dir:
					queue = append(queue, want{hash: e.Hash, typ: plumbing.TreeObject})
				default:
					queue = append(queue, want{hash: e.Hash, typ: plumbing.BlobObject})
				}
			}
		default:
			return fmt.Errorf("object %s is a %s where a %s was expected", w.hash, obj.Type(), w.typ)
		}
	}
	if len(shallow) > 0 {
		if err := st.SetShallow(shallow); err != nil {
			return fmt.Errorf("record the shallow commits: %w", err)
		}
	}
	return nil
}

// ensure stores object h unless st has it: the loose object when the server
// has it, else the pack whose index lists it.
func (d *dumbRemote) ensure(ctx context.Context, st storage.Storer, h plumbing.Hash) error {
	if st.HasEncodedObject(h) == nil {
		return nil
	}
	hex := h.String()
	body, err := d.get(ctx, "objects/"+hex[:2]+"/"+hex[2:])
	if err == nil {
		defer body.Close()
		return storeLoose(st, h, body)
	}
	if !errors.Is(err, errNotFound) {
		return err
	}
	pack, err := d.packOf(ctx, h)
	if err != nil {
		return err
	}
	if pack == "" {
		return fmt.Errorf("object %s is on %s neither loose nor in a pack objects/info/packs lists (was `git update-server-info` run?)", h, d.base)
	}
	if err := d.fetchPack(ctx, st, pack); err != nil {
		return err
	}
	if err := st.HasEncodedObject(h); err != nil {
		return fmt.Errorf("object %s is not in %s though its index lists it: %w", h, pack, err)
	}
	return nil
}

// storeLoose stores the zlib-compressed loose object in r as h, checking
// that its content hashes to h.
func storeLoose(st storage.Storer, h plumbing.Hash, r io.Reader) error {
	zr, err := objfile.NewReader(r)
	if err != nil {
		return fmt.Errorf("read loose object %s: %w", h, err)
	}
	defer zr.Close()
	typ, size, err := zr.Header()
	if err != nil {
		return fmt.Errorf("read the header of loose object %s: %w", h, err)
	}
	obj := st.NewEncodedObject()
	obj.SetType(typ)
	obj.SetSize(size)
	w, err := obj.Writer()
	if err != nil {
		return fmt.Errorf("store object %s: %w", h, err)
	}
	if _, err := io.CopyN(w, zr, size); err != nil {
		return fmt.Errorf("read loose object %s: %w", h, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("store object %s: %w", h, err)
	}
	if got := zr.Hash(); got != h {
		return fmt.Errorf("loose object %s hashes to %s: the server sent another object", h, got)
	}
	if _, err := st.SetEncodedObject(obj); err != nil {
		return fmt.Errorf("store object %s: %w", h, err)
	}
	return nil
}

// packOf is the pack whose index lists h, or "" when none does.
func (d *dumbRemote) packOf(ctx context.Context, h plumbing.Hash) (string, error) {
	if !d.packsRead {
		body, err := d.get(ctx, "objects/info/packs")
		switch {
		case errors.Is(err, errNotFound):
		case err != nil:
			return "", err
		default:
			sc := bufio.NewScanner(body)
			for sc.Scan() {
				if name, ok := strings.CutPrefix(sc.Text(), "P "); ok && strings.HasPrefix(name, "pack-") && strings.HasSuffix(name, ".pack") {
					d.packs = append(d.packs, name)
				}
			}
			err = sc.Err()
			body.Close()
			if err != nil {
				return "", fmt.Errorf("read objects/info/packs of %s: %w", d.base, err)
			}
		}
		d.packsRead = true
	}
	for _, pack := range d.packs {
		if d.fetched[pack] {
			continue
		}
		idx, err := d.index(ctx, pack)
		if err != nil {
			return "", err
		}
		if ok, err := idx.Contains(h); err != nil {
			return "", fmt.Errorf("look %s up in %s: %w", h, pack, err)
		} else if ok {
			return pack, nil
		}
	}
	return "", nil
}

// index reads the index of pack once.
func (d *dumbRemote) index(ctx context.Context, pack string) (*idxfile.MemoryIndex, error) {
	if idx, ok := d.indexes[pack]; ok {
		return idx, nil
	}
	body, err := d.get(ctx, "objects/pack/"+strings.TrimSuffix(pack, ".pack")+".idx")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	idx := idxfile.NewMemoryIndex()
	if err := idxfile.NewDecoder(bufio.NewReader(body)).Decode(idx); err != nil {
		return nil, fmt.Errorf("read the index of %s: %w", pack, err)
	}
	d.indexes[pack] = idx
	return idx, nil
}

// fetchPack stores every object of pack; go-git checks the pack's checksum
// and indexes it as it writes it.
func (d *dumbRemote) fetchPack(ctx context.Context, st storage.Storer, pack string) error {
	body, err := d.get(ctx, "objects/pack/"+pack)
	if err != nil {
		return err
	}
	defer body.Close()
	if err := packfile.UpdateObjectStorage(st, body); err != nil {
		return fmt.Errorf("store %s of %s: %w", pack, d.base, err)
	}
	d.fetched[pack] = true
	return nil
}
