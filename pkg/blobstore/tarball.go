package blobstore

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

// copyBufSize is the buffer of file copies in and out of tar streams.
const copyBufSize = 1 << 20

// WriteTar writes dir as a tar stream (PAX format) to w: regular files,
// directories (also empty ones), symlinks and hard links, with modes,
// mtimes and numeric ownership. Entries are sorted by name so the same tree
// gives the same bytes (artifacts are content-addressed). Sockets, devices
// and FIFOs are skipped with a warning. Nothing outside dir is read: the walk
// goes through an os.Root and never follows symlinks.
func WriteTar(ctx context.Context, w io.Writer, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("archive %s: %w", dir, err)
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	a := &archiver{root: root, tw: tw, links: map[fileID]string{}, buf: make([]byte, copyBufSize)}
	if err := a.walk(ctx, "."); err != nil {
		return fmt.Errorf("archive %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("archive %s: finish tar: %w", dir, err)
	}
	return nil
}

type fileID struct{ dev, ino uint64 }

type archiver struct {
	root  *os.Root
	tw    *tar.Writer
	links map[fileID]string // first name of each multiply-linked file
	buf   []byte
}

func (a *archiver) walk(ctx context.Context, rel string) error {
	f, err := a.root.Open(rel)
	if err != nil {
		return err
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("read directory %s: %w", rel, err)
	}
	slices.SortFunc(entries, func(x, y fs.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := path.Join(rel, e.Name())
		fi, err := a.root.Lstat(name)
		if err != nil {
			return err
		}
		if err := a.add(ctx, name, fi); err != nil {
			return err
		}
		if fi.IsDir() {
			if err := a.walk(ctx, name); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *archiver) add(ctx context.Context, name string, fi fs.FileInfo) error {
	hdr := &tar.Header{
		Name:    name,
		Mode:    tarMode(fi.Mode()),
		ModTime: fi.ModTime(),
		Format:  tar.FormatPAX,
	}
	st, hasStat := ownership(fi)
	if hasStat {
		hdr.Uid, hdr.Gid = st.uid, st.gid
	}
	switch m := fi.Mode(); {
	case m.IsDir():
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
	case m&fs.ModeSymlink != 0:
		target, err := a.root.Readlink(name)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
	case m.IsRegular():
		if hasStat && st.nlink > 1 {
			id := st.id
			if first, ok := a.links[id]; ok {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				return a.tw.WriteHeader(hdr)
			}
			a.links[id] = name
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		return a.addFile(ctx, hdr)
	default:
		slog.Warn("archive: skipping special file", "path", name, "mode", m.String())
		return nil
	}
	return a.tw.WriteHeader(hdr)
}

func (a *archiver) addFile(ctx context.Context, hdr *tar.Header) error {
	f, err := a.root.Open(hdr.Name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := a.tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.CopyBuffer(a.tw, io.LimitReader(ctxReader{ctx, f}, hdr.Size), a.buf)
	if err != nil {
		return fmt.Errorf("archive %s: %w", hdr.Name, err)
	}
	if n != hdr.Size {
		return fmt.Errorf("archive %s: file shrank from %d to %d bytes while being archived", hdr.Name, hdr.Size, n)
	}
	return nil
}

// tarMode is the tar header mode of an fs.FileMode: permissions plus the
// setuid, setgid and sticky bits.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// fileMode is the inverse of tarMode.
func fileMode(mode int64) fs.FileMode {
	m := fs.FileMode(mode & 0o777)
	if mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// ErrUnsafePath is returned (wrapped) for an entry that would land outside
// the extraction target or that may not be extracted at all (devices).
var ErrUnsafePath = errors.New("unsafe tar entry")

// Extract unpacks the tar stream r into dir (which must exist). It keeps
// modes, symlinks, empty directories, mtimes (directories' after their
// contents), and, when running as root, numeric ownership. Every filesystem
// operation goes through an os.Root on dir, so nothing can be created or
// written outside it; entries with absolute names or ".." components, hard
// links to outside names, and device files and FIFOs are refused with
// ErrUnsafePath. Existing non-directories are replaced. The default
// ExtractLimits apply (see ExtractLimited).
func Extract(ctx context.Context, r io.Reader, dir string) error {
	return ExtractLimited(ctx, r, dir, ExtractLimits{})
}

// ExtractLimited is Extract with caps on the bytes and entries written:
// an archive over either is refused with ErrExtractLimit before the entry
// that crosses it is written (a file's declared size counts up front, so a
// decompression bomb stops at its first header).
func ExtractLimited(ctx context.Context, r io.Reader, dir string, limits ExtractLimits) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("extract into %s: %w", dir, err)
	}
	defer root.Close()
	x := &extractor{root: root, chown: os.Geteuid() == 0, buf: make([]byte, copyBufSize), limits: limits.withDefaults()}
	if err := x.run(ctx, tar.NewReader(r)); err != nil {
		return fmt.Errorf("extract into %s: %w", dir, err)
	}
	return nil
}

type dirAttrs struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
	atime time.Time
}

type extractor struct {
	root  *os.Root
	chown bool
	buf   []byte
	// dirs get their modes and mtimes at the end: writing their contents
	// would change the mtime, and a read-only mode would stop the writes.
	dirs []dirAttrs

	limits       ExtractLimits
	bytes, files int64 // written so far
}

// count charges one entry of size bytes against the limits.
func (x *extractor) count(hdr *tar.Header) error {
	x.files++
	if x.files > x.limits.MaxFiles {
		return fmt.Errorf("%w: more than %d files and directories (the cap on entries per extraction)", ErrExtractLimit, x.limits.MaxFiles)
	}
	if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeRegA {
		if hdr.Size > x.limits.MaxBytes-x.bytes {
			return fmt.Errorf("%w: %q (%d bytes) takes the artifact over %d bytes (the cap on bytes per extraction)", ErrExtractLimit, hdr.Name, hdr.Size, x.limits.MaxBytes)
		}
		x.bytes += hdr.Size
	}
	return nil
}

func (x *extractor) run(ctx context.Context, tr *tar.Reader) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read tar: %w", err)
		}
		if err := x.count(hdr); err != nil {
			return err
		}
		if err := x.entry(ctx, hdr, tr); err != nil {
			return err
		}
	}
	// Deepest first, so setting a parent's mtime comes after its children's.
	for i := len(x.dirs) - 1; i >= 0; i-- {
		d := x.dirs[i]
		if err := x.root.Chmod(d.name, d.mode); err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		if !d.mtime.IsZero() {
			if err := x.root.Chtimes(d.name, d.atime, d.mtime); err != nil {
				return fmt.Errorf("%s: %w", d.name, err)
			}
		}
	}
	return nil
}

// cleanName validates a tar name and returns it relative to the target.
// "" means the target itself.
func cleanName(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: empty name", ErrUnsafePath)
	}
	if strings.HasPrefix(name, "/") || strings.Contains(name, "\\") || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("%w: %q is absolute or not a portable path", ErrUnsafePath, name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: %q has a .. component", ErrUnsafePath, name)
		}
	}
	clean := path.Clean(name)
	if clean == "." {
		return "", nil
	}
	return clean, nil
}

// CheckEntry applies the rules of Extract that need no file system to one
// tar entry: a name and hard-link target inside the target (no absolute
// names, no ".." components), a symlink with a target, no device files,
// FIFOs or sparse files, no entry types Extract does not know. A refusal
// wraps ErrUnsafePath, except an unknown type. An upload can thus be
// refused as it arrives rather than when a step extracts it.
func CheckEntry(hdr *tar.Header) error {
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if name == "" {
		// The target itself: Extract leaves it alone, whatever its type.
		return nil
	}
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeXGlobalHeader:
		return nil
	case tar.TypeReg, tar.TypeRegA:
		if isSparse(hdr) {
			// A sparse entry can claim any logical size with no data behind
			// it: extracting its holes could fill the disk.
			return fmt.Errorf("%w: %q is a sparse file", ErrUnsafePath, hdr.Name)
		}
		return nil
	case tar.TypeSymlink:
		if hdr.Linkname == "" {
			return fmt.Errorf("%w: symlink %q has no target", ErrUnsafePath, hdr.Name)
		}
		// The target is kept as is: it may point anywhere, but Extract
		// never writes through it.
		return nil
	case tar.TypeLink:
		if target, err := cleanName(hdr.Linkname); err != nil || target == "" {
			return fmt.Errorf("%w: hard link %q to %q leaves the target", ErrUnsafePath, hdr.Name, hdr.Linkname)
		}
		return nil
	case tar.TypeGNUSparse:
		return fmt.Errorf("%w: %q is a sparse file", ErrUnsafePath, hdr.Name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return fmt.Errorf("%w: %q is a device file or FIFO", ErrUnsafePath, hdr.Name)
	default:
		return fmt.Errorf("%s: unsupported tar entry type %q", hdr.Name, hdr.Typeflag)
	}
}

// EntryChecker is CheckEntry for a whole archive, entry after entry: it
// also refuses an entry (or a hard link's target) that lies under a
// symlink an earlier entry made, which Extract would refuse only when it
// got there (the root does not follow a link out of the target). A tar
// made from a real directory never has one: tar does not descend links.
//
// It keeps a 64-bit hash of each symlink's name, not the name, and hashes
// an entry's parent directories in one pass over its name: an upload of
// long names (a tar's may be 1 MiB) costs neither memory nor quadratic
// time on the server.
type EntryChecker struct {
	seed     maphash.Seed
	symlinks map[uint64]bool // hashes of cleaned names that are symlinks now
}

// Check applies CheckEntry and the symlink rule to the next entry.
func (c *EntryChecker) Check(hdr *tar.Header) error {
	if err := CheckEntry(hdr); err != nil {
		return err
	}
	name, _ := cleanName(hdr.Name) // checked
	if name == "" {
		return nil
	}
	if link := c.under(name); link != "" {
		return fmt.Errorf("%w: %q lies under %q, a symlink of the archive", ErrUnsafePath, hdr.Name, link)
	}
	if hdr.Typeflag == tar.TypeLink {
		target, _ := cleanName(hdr.Linkname) // checked
		if link := c.under(target); link != "" || c.symlinks[c.hash(target)] {
			return fmt.Errorf("%w: hard link %q to %q goes through a symlink of the archive", ErrUnsafePath, hdr.Name, hdr.Linkname)
		}
	}
	if hdr.Typeflag == tar.TypeSymlink {
		if c.symlinks == nil {
			c.seed, c.symlinks = maphash.MakeSeed(), map[uint64]bool{}
		}
		c.symlinks[c.hash(name)] = true
	} else if c.symlinks != nil {
		// Extract replaces what was there.
		delete(c.symlinks, c.hash(name))
	}
	return nil
}

func (c *EntryChecker) hash(name string) uint64 {
	return maphash.String(c.seed, name)
}

// under returns the symlink that name lies under ("" if none). Each parent
// is hashed by extending the previous one's hash (maphash's sum does not
// depend on how the writes were split).
func (c *EntryChecker) under(name string) string {
	if len(c.symlinks) == 0 {
		return ""
	}
	var h maphash.Hash
	h.SetSeed(c.seed)
	for end := 0; ; end++ {
		i := strings.IndexByte(name[end:], '/')
		if i < 0 {
			return ""
		}
		_, _ = h.WriteString(name[end : end+i])
		end += i
		if c.symlinks[h.Sum64()] {
			return name[:end]
		}
		_ = h.WriteByte('/')
	}
}

func (x *extractor) entry(ctx context.Context, hdr *tar.Header, r io.Reader) error {
	if err := CheckEntry(hdr); err != nil {
		return err
	}
	name, _ := cleanName(hdr.Name) // checked
	mode := fileMode(hdr.Mode)
	mtime := hdr.ModTime
	atime := hdr.AccessTime
	if atime.IsZero() {
		atime = mtime
	}
	if name == "" {
		// The target itself: it is not ours to re-mode.
		return nil
	}
	if dir := path.Dir(name); dir != "." {
		// Parents missing from the stream; MkdirAll through the root refuses
		// a parent that is a symlink leading outside.
		if err := x.root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("%s: create parent: %w", name, err)
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		fi, err := x.root.Lstat(name)
		switch {
		case err == nil && fi.IsDir():
		case err == nil:
			if err := x.root.Remove(name); err != nil {
				return fmt.Errorf("%s: replace: %w", name, err)
			}
			fallthrough
		case errors.Is(err, fs.ErrNotExist):
			if err := x.root.Mkdir(name, 0o700); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		default:
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := x.own(name, hdr); err != nil {
			return err
		}
		x.dirs = append(x.dirs, dirAttrs{name: name, mode: mode, mtime: mtime, atime: atime})
		return nil

	case tar.TypeReg, tar.TypeRegA:
		if err := x.replace(name); err != nil {
			return err
		}
		f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		// writerOnly: *os.File's ReadFrom would copy through a 32 KiB
		// buffer of its own, a write syscall per 32 KiB instead of per MiB.
		_, err = io.CopyBuffer(writerOnly{f}, ctxReader{ctx, r}, x.buf)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return x.attrs(name, hdr, mode, atime, mtime)

	case tar.TypeSymlink:
		if err := x.replace(name); err != nil {
			return err
		}
		// The target is stored as is: it may point anywhere, but nothing is
		// ever written through it (the root refuses to leave the target).
		if err := x.root.Symlink(hdr.Linkname, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return x.own(name, hdr)

	case tar.TypeLink:
		target, _ := cleanName(hdr.Linkname) // checked
		if target == name {
			return nil
		}
		if err := x.replace(name); err != nil {
			return err
		}
		if err := x.root.Link(target, name); err != nil {
			return fmt.Errorf("%s: hard link to %s: %w", name, target, err)
		}
		return nil

	default:
		// A global header; CheckEntry refused every other type.
		return nil
	}
}

// isSparse reports PAX sparse-file records (archive/tar expands the holes).
func isSparse(hdr *tar.Header) bool {
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// replace removes an existing non-directory at name so that a new entry
// never writes through an old symlink or into an old hard link.
func (x *extractor) replace(name string) error {
	fi, err := x.root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%s: %w", name, err)
	case fi.IsDir():
		return fmt.Errorf("%s: a directory is in the way", name)
	}
	if err := x.root.Remove(name); err != nil {
		return fmt.Errorf("%s: replace: %w", name, err)
	}
	return nil
}

func (x *extractor) own(name string, hdr *tar.Header) error {
	if !x.chown {
		return nil
	}
	if err := x.root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("%s: chown: %w", name, err)
	}
	return nil
}

// attrs sets ownership first (chown clears setuid bits), then mode and times.
func (x *extractor) attrs(name string, hdr *tar.Header, mode fs.FileMode, atime, mtime time.Time) error {
	if err := x.own(name, hdr); err != nil {
		return err
	}
	if err := x.root.Chmod(name, mode); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if !mtime.IsZero() {
		if err := x.root.Chtimes(name, atime, mtime); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// ctxReader stops a long copy when ctx is done.
// writerOnly hides a writer's ReadFrom, so io.CopyBuffer uses its buffer.
type writerOnly struct{ w io.Writer }

func (w writerOnly) Write(p []byte) (int, error) { return w.w.Write(p) }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
