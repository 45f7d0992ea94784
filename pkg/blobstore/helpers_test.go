package blobstore_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
)

// entry is what a test compares of one file system entry.
type entry struct {
	Type  string // dir, file, symlink
	Mode  fs.FileMode
	Size  int64
	SHA   string
	Link  string
	MTime time.Time // not for symlinks: their mtimes are not restored
}

// snapshot describes every entry under dir by relative path. Inode numbers
// are replaced by the first path sharing them, so hard links compare.
func snapshot(dir string) (map[string]entry, error) {
	out := map[string]entry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := entry{Mode: fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)}
		switch {
		case fi.IsDir():
			e.Type, e.MTime = "dir", fi.ModTime()
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Type = "symlink"
			e.Mode = 0
			e.Link, err = os.Readlink(p)
			if err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			e.Type, e.Size, e.MTime = "file", fi.Size(), fi.ModTime()
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			e.SHA = hex.EncodeToString(sum[:])
		default:
			e.Type = fi.Mode().Type().String()
		}
		out[filepath.ToSlash(rel)] = e
		return nil
	})
	return out, err
}

// inode returns the inode number of p.
func inode(p string) uint64 {
	fi, err := os.Lstat(p)
	if err != nil {
		return 0
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// randomBytes is deterministic incompressible data.
func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n - n%8; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// tarEntry is one entry of a hand-made tarball.
type tarEntry struct {
	Name     string
	Type     byte
	Body     string
	Linkname string
	Mode     int64
}

// makeTar builds a tar stream from entries.
func makeTar(entries ...tarEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.Mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.Name, Typeflag: e.Type, Linkname: e.Linkname, Mode: mode, ModTime: time.Unix(1_600_000_000, 0), Format: tar.FormatPAX}
		if e.Type == tar.TypeReg {
			hdr.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			panic(fmt.Sprintf("tar header %q: %v", e.Name, err))
		}
		if e.Type == tar.TypeReg {
			if _, err := io.WriteString(tw, e.Body); err != nil {
				panic(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func zstdBytes(b []byte) []byte {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		panic(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// dirEntries lists the names in dir (nil when empty).
func dirEntries(dir string) []string {
	des, err := os.ReadDir(dir)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	var names []string
	for _, d := range des {
		names = append(names, d.Name())
	}
	return names
}

// sandbox is a base directory holding the extraction target and a sibling
// directory "outside" with one victim file: after an extraction, nothing but
// the two may exist in the base, and outside must hold the untouched victim.
type sandbox struct {
	Base, Target, Outside string
}

const victimContent = "victim: must never change"

func newSandbox(base string) (sandbox, error) {
	s := sandbox{Base: base, Target: filepath.Join(base, "target"), Outside: filepath.Join(base, "outside")}
	for _, d := range []string{s.Target, s.Outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return s, err
		}
	}
	return s, os.WriteFile(filepath.Join(s.Outside, "victim"), []byte(victimContent), 0o644)
}

// escapes says what, if anything, changed outside the target.
func (s sandbox) escapes() []string {
	var bad []string
	for _, n := range dirEntries(s.Base) {
		if n != "target" && n != "outside" {
			bad = append(bad, "created "+filepath.Join(s.Base, n))
		}
	}
	for _, n := range dirEntries(s.Outside) {
		if n != "victim" {
			bad = append(bad, "created "+filepath.Join(s.Outside, n))
		}
	}
	victim := filepath.Join(s.Outside, "victim")
	fi, err := os.Lstat(victim)
	switch {
	case err != nil:
		bad = append(bad, "victim: "+err.Error())
	case !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644:
		bad = append(bad, "victim mode changed to "+fi.Mode().String())
	default:
		if b, _ := os.ReadFile(victim); string(b) != victimContent {
			bad = append(bad, fmt.Sprintf("victim content changed to %q", b))
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Nlink != 1 {
			bad = append(bad, fmt.Sprintf("victim has %d links", st.Nlink))
		}
	}
	return bad
}

// hostile is a tarball that must be refused. "{outside}" in names and link
// targets is replaced by the sandbox's outside directory.
type hostile struct {
	Name    string
	Entries []tarEntry
	WantErr string // substring of the error
}

func hostileCases() []hostile {
	const unsafe = "unsafe tar entry"
	const escapes = "escapes"
	return []hostile{
		{"a .. path", []tarEntry{{Name: "../outside/evil", Type: tar.TypeReg, Body: "x"}}, unsafe},
		{"a .. in the middle", []tarEntry{{Name: "a/../../outside/evil", Type: tar.TypeReg, Body: "x"}}, unsafe},
		{"a .. directory", []tarEntry{{Name: "../evil/", Type: tar.TypeDir}}, unsafe},
		{"an absolute path", []tarEntry{{Name: "{outside}/evil", Type: tar.TypeReg, Body: "x"}}, unsafe},
		{"writing through a relative symlink to outside", []tarEntry{
			{Name: "link", Type: tar.TypeSymlink, Linkname: "../outside"},
			{Name: "link/evil", Type: tar.TypeReg, Body: "x"},
		}, escapes},
		{"writing through an absolute symlink to outside", []tarEntry{
			{Name: "link", Type: tar.TypeSymlink, Linkname: "{outside}"},
			{Name: "link/victim", Type: tar.TypeReg, Body: "x"},
		}, escapes},
		{"a directory through a symlink to outside", []tarEntry{
			{Name: "link", Type: tar.TypeSymlink, Linkname: "../outside"},
			{Name: "link/sub/", Type: tar.TypeDir},
		}, escapes},
		{"a symlink chain leading outside", []tarEntry{
			{Name: "a", Type: tar.TypeSymlink, Linkname: "."},
			{Name: "b", Type: tar.TypeSymlink, Linkname: "a/.."},
			{Name: "b/outside/evil", Type: tar.TypeReg, Body: "x"},
		}, escapes},
		{"a symlink inside a symlinked directory", []tarEntry{
			{Name: "link", Type: tar.TypeSymlink, Linkname: "../outside"},
			{Name: "link/evil", Type: tar.TypeSymlink, Linkname: "/etc/passwd"},
		}, escapes},
		{"a hard link to a .. path", []tarEntry{{Name: "h", Type: tar.TypeLink, Linkname: "../outside/victim"}}, unsafe},
		{"a hard link to an absolute path", []tarEntry{{Name: "h", Type: tar.TypeLink, Linkname: "{outside}/victim"}}, unsafe},
		{"a hard link through a symlink to outside", []tarEntry{
			{Name: "link", Type: tar.TypeSymlink, Linkname: "../outside"},
			{Name: "h", Type: tar.TypeLink, Linkname: "link/victim"},
		}, escapes},
		{"a character device", []tarEntry{{Name: "null", Type: tar.TypeChar}}, unsafe},
		{"a block device", []tarEntry{{Name: "sda", Type: tar.TypeBlock}}, unsafe},
		{"a FIFO", []tarEntry{{Name: "fifo", Type: tar.TypeFifo}}, unsafe},
	}
}

// resolve fills in the sandbox's paths.
func (h hostile) resolve(s sandbox) []tarEntry {
	out := make([]tarEntry, len(h.Entries))
	for i, e := range h.Entries {
		e.Name = strings.ReplaceAll(e.Name, "{outside}", s.Outside)
		e.Linkname = strings.ReplaceAll(e.Linkname, "{outside}", s.Outside)
		out[i] = e
	}
	return out
}

// buildRichTree creates a tree with every kind of entry an artifact keeps:
// modes (setuid, read-only dirs), symlinks (relative, absolute, dangling),
// empty dirs, a hard link, nSmall small files and one file of bigSize bytes;
// mtimes are set to distinct past times, directories' last.
func buildRichTree(dir string, nSmall, bigSize int) {
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	must(os.MkdirAll(dir, 0o755))
	w := func(rel string, data []byte, mode os.FileMode) {
		p := filepath.Join(dir, rel)
		must(os.MkdirAll(filepath.Dir(p), 0o755))
		must(os.WriteFile(p, data, 0o600))
		must(os.Chmod(p, mode))
	}
	w("big.bin", randomBytes(42, bigSize), 0o644)
	w("bin/tool", []byte("#!/bin/sh\necho hi\n"), 0o755)
	w("bin/suid", []byte("suid"), 0o4755)
	w("secret", []byte("private"), 0o600)
	w("hard/a", []byte("linked"), 0o640)
	must(os.Link(filepath.Join(dir, "hard/a"), filepath.Join(dir, "hard/b")))
	must(os.MkdirAll(filepath.Join(dir, "empty/nested-empty"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "sticky"), 0o755))
	must(os.Chmod(filepath.Join(dir, "sticky"), 0o1777))
	must(os.Symlink("bin/tool", filepath.Join(dir, "rel-link")))
	must(os.Symlink("/etc/hostname", filepath.Join(dir, "abs-link")))
	must(os.Symlink("nowhere/at/all", filepath.Join(dir, "dangling")))
	must(os.Symlink("../bin", filepath.Join(dir, "empty/up-link")))
	for i := range nSmall {
		w(fmt.Sprintf("many/%02d/file-%05d.txt", i%100, i), []byte(fmt.Sprintf("small file %d\n", i)), 0o644)
	}
	w("readonly/inside", []byte("in a read-only dir"), 0o444)

	// mtimes: files first, then directories deepest first, so that setting
	// them does not disturb each other.
	base := time.Date(2020, 1, 2, 3, 4, 5, 123456789, time.UTC)
	var dirs []string
	i := 0
	must(filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		i++
		t := base.Add(time.Duration(i) * time.Minute)
		switch {
		case d.IsDir():
			dirs = append(dirs, p)
		case d.Type()&fs.ModeSymlink == 0:
			return os.Chtimes(p, t, t)
		}
		return nil
	}))
	for j := len(dirs) - 1; j >= 0; j-- {
		t := base.Add(-time.Duration(j+1) * time.Hour)
		must(os.Chtimes(dirs[j], t, t))
	}
	must(os.Chmod(filepath.Join(dir, "readonly"), 0o555))
}
