package atcclient

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"

	"github.com/klauspost/compress/gzip"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
)

// UploadOptions tune UploadArtifact.
type UploadOptions struct {
	// IncludeIgnored sends every file; otherwise, in a git work tree, the
	// files git would ignore stay home, as with fly.
	IncludeIgnored bool
	// Platform is the query's platform; empty means "linux".
	Platform string
	// Tags are worker tags, sent as fly sends them.
	Tags []string
	// Progress, if not nil, is called with the number of compressed bytes
	// sent so far, from the goroutine that sends them.
	Progress func(bytes int64)
}

// errUploadStopped closes the upload pipe when the request is over, so that
// the archiving goroutine stops writing.
var errUploadStopped = errors.New("upload request ended")

// UploadArtifact sends dir to team (the client's team when empty) as fly's
// `execute -i` does: POST /api/v1/teams/{team}/artifacts?platform=linux
// with the directory streamed as tar + gzip, without a temporary file.
func (c *Client) UploadArtifact(ctx context.Context, team, dir string, opts UploadOptions) (concourse.WorkerArtifact, error) {
	op := "upload " + dir
	fi, err := os.Stat(dir)
	if err != nil {
		return concourse.WorkerArtifact{}, fmt.Errorf("%s: %w", op, err)
	}
	if !fi.IsDir() {
		return concourse.WorkerArtifact{}, fmt.Errorf("%s: not a directory", op)
	}
	files, err := UploadFiles(ctx, dir, opts.IncludeIgnored)
	if err != nil {
		return concourse.WorkerArtifact{}, fmt.Errorf("%s: %w", op, err)
	}

	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := WriteTarGz(ctx, pw, dir, files)
		pw.CloseWithError(err) // nil closes with EOF
		done <- err
	}()

	platform := opts.Platform
	if platform == "" {
		platform = "linux"
	}
	q := url.Values{"platform": {platform}}
	if len(opts.Tags) > 0 {
		q["tags"] = opts.Tags
	}
	var out concourse.WorkerArtifact
	doErr := c.do(ctx, request{
		op: op, method: http.MethodPost, path: c.teamPath(team) + "/artifacts", query: q,
		body: &progressReader{r: pr, progress: opts.Progress}, contentType: "application/octet-stream",
	}, &out)
	// The transport may stop reading early (an error answer, a cut
	// connection): unblock the writer, then wait for it either way.
	pr.CloseWithError(errUploadStopped)
	writeErr := <-done
	if errors.Is(writeErr, errUploadStopped) {
		writeErr = nil // a consequence, not a cause
	}
	if writeErr != nil {
		// The writer's error says what went wrong locally without the noise
		// of the transport's, which wraps it.
		return concourse.WorkerArtifact{}, fmt.Errorf("%s: %w", op, writeErr)
	}
	if doErr != nil {
		return concourse.WorkerArtifact{}, doErr
	}
	return out, nil
}

// UploadFiles lists what an upload of dir sends, as fly decides it: with
// includeIgnored, or when dir is not in a git work tree, "." (everything);
// otherwise the files git knows (less those deleted from the work tree) and
// the untracked ones it does not ignore, relative to dir.
func UploadFiles(ctx context.Context, dir string, includeIgnored bool) ([]string, error) {
	if includeIgnored {
		return []string{"."}, nil
	}
	tracked, err := gitLS(ctx, dir)
	if err != nil {
		// Not a work tree, or no git: everything goes, as with fly.
		return []string{"."}, nil
	}
	deleted, err := gitLS(ctx, dir, "--deleted")
	if err != nil {
		return nil, err
	}
	untracked, err := gitLS(ctx, dir, "--others", "--exclude-standard")
	if err != nil {
		return nil, err
	}
	files := slices.DeleteFunc(tracked, func(f string) bool { return slices.Contains(deleted, f) })
	return append(files, untracked...), nil
}

func gitLS(ctx context.Context, dir string, flags ...string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"ls-files", "-z"}, flags...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files %v in %s: %w: %s", flags, dir, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var files []string
	for f := range bytes.SplitSeq(out, []byte{0}) {
		if len(f) > 0 {
			files = append(files, string(f))
		}
	}
	return files, nil
}

// WriteTarGz writes the files of dir (paths relative to it; "." is all of
// it) to w as a gzip-compressed tar stream. A directory in files is sent
// whole; the parent directories of files are sent too, so their modes
// survive. Nothing outside dir is read: files are opened through an
// os.Root and symlinks are sent as symlinks, never followed.
func WriteTarGz(ctx context.Context, w io.Writer, dir string, files []string) error {
	gz := gzip.NewWriter(w)
	if slices.Contains(files, ".") {
		// blobstore's writer keeps hard links, ownership and empty dirs.
		if err := blobstore.WriteTar(ctx, gz, dir); err != nil {
			return err
		}
		return closeGzip(gz)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("archive %s: %w", dir, err)
	}
	defer root.Close()
	a := &listArchiver{ctx: ctx, root: root, tw: tar.NewWriter(gz), sent: map[string]bool{}}
	for _, f := range files {
		name := path.Clean(f)
		if !fs.ValidPath(name) {
			return fmt.Errorf("archive %s: %q is not a path inside it", dir, f)
		}
		if err := a.addParents(name); err != nil {
			return fmt.Errorf("archive %s: %w", dir, err)
		}
		err := a.add(name)
		if errors.Is(err, fs.ErrNotExist) {
			// git listed a file that a concurrent change removed.
			continue
		}
		if err != nil {
			return fmt.Errorf("archive %s: %w", dir, err)
		}
	}
	if err := a.tw.Close(); err != nil {
		return fmt.Errorf("archive %s: finish tar: %w", dir, err)
	}
	return closeGzip(gz)
}

func closeGzip(gz *gzip.Writer) error {
	if err := gz.Close(); err != nil {
		return fmt.Errorf("gzip: %w", err)
	}
	return nil
}

// listArchiver writes chosen entries of a directory, each once.
type listArchiver struct {
	ctx  context.Context
	root *os.Root
	tw   *tar.Writer
	sent map[string]bool
}

// addParents sends name's parent directories (without their contents),
// outermost first, so that they keep their modes.
func (a *listArchiver) addParents(name string) error {
	parent := path.Dir(name)
	if parent == "." || a.sent[parent] {
		return nil
	}
	if err := a.addParents(parent); err != nil {
		return err
	}
	return a.entry(parent, false)
}

// add sends name, and a directory's contents.
func (a *listArchiver) add(name string) error { return a.entry(name, true) }

func (a *listArchiver) entry(name string, recurse bool) error {
	if err := a.ctx.Err(); err != nil {
		return err
	}
	if a.sent[name] && !recurse {
		return nil
	}
	fi, err := a.root.Lstat(name)
	if err != nil {
		return err
	}
	mode := fi.Mode()
	if !mode.IsRegular() && !mode.IsDir() && mode&fs.ModeSymlink == 0 {
		return nil // sockets, devices and FIFOs have no place in an artifact
	}
	if !a.sent[name] {
		a.sent[name] = true
		if err := a.header(name, fi); err != nil {
			return err
		}
	}
	if fi.IsDir() && recurse {
		entries, err := fs.ReadDir(a.root.FS(), name)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := a.entry(path.Join(name, e.Name()), true); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *listArchiver) header(name string, fi fs.FileInfo) error {
	var link string
	if fi.Mode()&fs.ModeSymlink != 0 {
		var err error
		if link, err = a.root.Readlink(name); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	hdr.Name = name
	if fi.IsDir() {
		hdr.Name += "/"
	}
	// User and group names mean nothing where the artifact is unpacked.
	hdr.Uname, hdr.Gname = "", ""
	if err := a.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := a.root.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(a.tw, f); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

// DownloadArtifact fetches an artifact of team (the client's team when
// empty) into dir, creating it if needed: GET
// /api/v1/teams/{team}/artifacts/{id}, a tar + gzip stream extracted with
// blobstore.Extract, which refuses entries that would land outside dir.
// progress, if not nil, is called with the compressed bytes read so far.
func (c *Client) DownloadArtifact(ctx context.Context, team string, id int64, dir string, progress func(int64)) error {
	op := fmt.Sprintf("download artifact %d into %s", id, dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	resp, err := c.send(ctx, request{op: op, method: http.MethodGet, path: c.teamPath(team) + "/artifacts/" + strconv.FormatInt(id, 10)})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	gz, err := gzip.NewReader(bufio.NewReader(&progressReader{r: resp.Body, progress: progress}))
	if err != nil {
		return fmt.Errorf("%s: gzip: %w", op, err)
	}
	defer gz.Close()
	if err := blobstore.Extract(ctx, gz, dir); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

type progressReader struct {
	r        io.Reader
	n        int64
	progress func(int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.n += int64(n)
		if p.progress != nil {
			p.progress(p.n)
		}
	}
	return n, err
}
