// Command mkimage assembles a single-layer OCI image archive from local files,
// without dockerd or a registry, for `ctr images import` into the local
// cluster's containerd.
//
//	mkimage -ref porter.local/porter:dev -o porter.tar -entrypoint '["/porter"]' \
//	    bin/porter:/porter rootfs/busybox:/
//
// Each SRC:DST argument puts the file SRC at DST, or, when SRC is a directory,
// its whole tree under DST (symlinks are kept as symlinks). Later arguments win
// when paths collide. /tmp (mode 1777) is always present.
//
// The output is reproducible: entries are sorted, owned by root and dated at the
// Unix epoch, so the same inputs give the same manifest digest. The digest is
// printed on stdout and written to OUT.digest; callers compare it with the digest
// containerd already has to skip imports of unchanged images. An existing OUT
// with the same digest is left untouched.
package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
	// containerd's importer names the image after this annotation.
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

type options struct {
	ref        string
	out        string
	entrypoint []string
	cmd        []string
	env        []string
	workdir    string
	user       string
	sources    []mapping
}

type mapping struct{ src, dst string }

// entry is one path in the layer.
type entry struct {
	name     string // absolute path inside the image, "/" separated
	src      string // host file to copy, for regular files
	linkname string // symlink target
	mode     fs.FileMode
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(2)
	}
	digest, err := build(opts)
	if err != nil {
		slog.Error("mkimage failed", "ref", opts.ref, "err", err)
		os.Exit(1)
	}
	fmt.Println(digest)
}

func parseFlags(args []string) (options, error) {
	var (
		opts                options
		entrypoint, command string
		env                 stringList
	)
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fs.StringVar(&opts.ref, "ref", "", "image reference, e.g. porter.local/porter:dev (required)")
	fs.StringVar(&opts.out, "o", "", "output archive path (required)")
	fs.StringVar(&entrypoint, "entrypoint", "", `entrypoint as a JSON array, e.g. '["/porter"]'`)
	fs.StringVar(&command, "cmd", "", `default command as a JSON array, e.g. '["sh"]'`)
	fs.Var(&env, "env", "KEY=VALUE added to the image config (repeatable)")
	fs.StringVar(&opts.workdir, "workdir", "/", "working directory")
	fs.StringVar(&opts.user, "user", "", "user the image runs as")
	if err := fs.Parse(args); err != nil {
		return opts, err
	}
	if opts.ref == "" || opts.out == "" {
		return opts, errors.New("-ref and -o are required")
	}
	for _, raw := range []struct {
		flag string
		val  string
		dst  *[]string
	}{{"entrypoint", entrypoint, &opts.entrypoint}, {"cmd", command, &opts.cmd}} {
		if raw.val == "" {
			continue
		}
		if err := json.Unmarshal([]byte(raw.val), raw.dst); err != nil {
			return opts, fmt.Errorf("parsing -%s %q as a JSON array: %w", raw.flag, raw.val, err)
		}
	}
	opts.env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	for _, arg := range fs.Args() {
		src, dst, ok := strings.Cut(arg, ":")
		if !ok || src == "" || !strings.HasPrefix(dst, "/") {
			return opts, fmt.Errorf("argument %q is not SRC:/DST", arg)
		}
		opts.sources = append(opts.sources, mapping{src: src, dst: path.Clean(dst)})
	}
	if len(opts.sources) == 0 {
		return opts, errors.New("no SRC:DST arguments: the image would be empty")
	}
	return opts, nil
}

func build(opts options) (string, error) {
	entries, err := collect(opts.sources)
	if err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(filepath.Dir(opts.out), ".mkimage-")
	if err != nil {
		return "", fmt.Errorf("creating a work directory next to %s: %w", opts.out, err)
	}
	defer os.RemoveAll(work)

	layerPath := filepath.Join(work, "layer.tar")
	layerDigest, layerSize, err := writeLayer(layerPath, entries)
	if err != nil {
		return "", fmt.Errorf("writing the layer: %w", err)
	}

	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      time.Unix(0, 0).UTC(),
		"config": map[string]any{
			"Entrypoint": opts.entrypoint,
			"Cmd":        opts.cmd,
			"Env":        opts.env,
			"WorkingDir": opts.workdir,
			"User":       opts.user,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return "", fmt.Errorf("encoding the image config: %w", err)
	}
	configDesc := descriptor(mediaTypeConfig, config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeManifest,
		"config":        configDesc,
		"layers":        []map[string]any{{"mediaType": mediaTypeLayer, "digest": layerDigest, "size": layerSize}},
	})
	if err != nil {
		return "", fmt.Errorf("encoding the manifest: %w", err)
	}
	manifestDesc := descriptor(mediaTypeManifest, manifest)
	manifestDigest := manifestDesc["digest"].(string)

	if existing, err := os.ReadFile(opts.out + ".digest"); err == nil && strings.TrimSpace(string(existing)) == manifestDigest {
		if _, err := os.Stat(opts.out); err == nil {
			return manifestDigest, nil
		}
	}

	tag := opts.ref[strings.LastIndex(opts.ref, ":")+1:]
	manifestDesc["annotations"] = map[string]string{annotationContainerdName: opts.ref, annotationRefName: tag}
	manifestDesc["platform"] = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeIndex,
		"manifests":     []any{manifestDesc},
	})
	if err != nil {
		return "", fmt.Errorf("encoding the index: %w", err)
	}

	tmpOut := filepath.Join(work, "image.tar")
	if err := writeArchive(tmpOut, layerPath, layerDigest, map[string][]byte{
		"oci-layout":                            []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json":                            index,
		blobPath(configDesc["digest"].(string)): config,
		blobPath(manifestDigest):                manifest,
	}); err != nil {
		return "", fmt.Errorf("writing the archive: %w", err)
	}
	if err := os.Rename(tmpOut, opts.out); err != nil {
		return "", fmt.Errorf("moving the archive into place: %w", err)
	}
	if err := os.WriteFile(opts.out+".digest", []byte(manifestDigest+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("writing the digest file: %w", err)
	}
	return manifestDigest, nil
}

// collect walks the sources and returns every path of the layer, parents first.
func collect(sources []mapping) ([]entry, error) {
	byName := map[string]entry{"/tmp": {name: "/tmp", mode: fs.ModeDir | fs.ModeSticky | 0o777}}
	add := func(e entry) {
		for dir := path.Dir(e.name); dir != "/"; dir = path.Dir(dir) {
			if _, ok := byName[dir]; !ok {
				byName[dir] = entry{name: dir, mode: fs.ModeDir | 0o755}
			}
		}
		if e.name != "/" {
			byName[e.name] = e
		}
	}
	for _, m := range sources {
		info, err := os.Lstat(m.src)
		if err != nil {
			return nil, fmt.Errorf("reading source %s: %w", m.src, err)
		}
		if !info.IsDir() {
			e, err := newEntry(m.src, m.dst, info)
			if err != nil {
				return nil, err
			}
			add(e)
			continue
		}
		err = filepath.WalkDir(m.src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(m.src, p)
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			e, err := newEntry(p, path.Join(m.dst, filepath.ToSlash(rel)), info)
			if err != nil {
				return err
			}
			add(e)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("walking source %s: %w", m.src, err)
		}
	}
	entries := make([]entry, 0, len(byName))
	for _, e := range byName {
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	return entries, nil
}

func newEntry(src, name string, info fs.FileInfo) (entry, error) {
	e := entry{name: name, mode: info.Mode()}
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return e, fmt.Errorf("reading symlink %s: %w", src, err)
		}
		e.linkname = target
	case info.Mode().IsRegular():
		e.src = src
	case info.IsDir():
	default:
		return e, fmt.Errorf("%s: only regular files, directories and symlinks can go into an image", src)
	}
	return e, nil
}

// writeLayer writes the layer tar and returns its digest and size.
func writeLayer(dst string, entries []entry) (string, int64, error) {
	f, err := os.Create(dst)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	counter := &countingWriter{w: io.MultiWriter(f, h)}
	tw := tar.NewWriter(counter)
	for _, e := range entries {
		if err := writeEntry(tw, e); err != nil {
			return "", 0, fmt.Errorf("adding %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return "", 0, err
	}
	if err := f.Close(); err != nil {
		return "", 0, err
	}
	return digestOf(h), counter.n, nil
}

func writeEntry(tw *tar.Writer, e entry) error {
	hdr := &tar.Header{
		Name:    strings.TrimPrefix(e.name, "/"),
		Mode:    int64(e.mode.Perm()),
		ModTime: time.Unix(0, 0),
		Format:  tar.FormatPAX,
	}
	if e.mode&fs.ModeSticky != 0 {
		hdr.Mode |= 0o1000
	}
	if e.mode&fs.ModeSetuid != 0 {
		hdr.Mode |= 0o4000
	}
	switch {
	case e.mode.IsDir():
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		return tw.WriteHeader(hdr)
	case e.linkname != "":
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = e.linkname
		return tw.WriteHeader(hdr)
	}
	src, err := os.Open(e.src)
	if err != nil {
		return err
	}
	defer src.Close()
	info, err := src.Stat()
	if err != nil {
		return err
	}
	hdr.Typeflag = tar.TypeReg
	hdr.Size = info.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}

// writeArchive writes the OCI image layout as a tar: the layer blob streamed
// from disk, everything else from memory.
func writeArchive(dst, layerPath, layerDigest string, files map[string][]byte) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(files[name]); err != nil {
			return err
		}
	}
	layer, err := os.Open(layerPath)
	if err != nil {
		return err
	}
	defer layer.Close()
	info, err := layer.Stat()
	if err != nil {
		return err
	}
	hdr := &tar.Header{Name: blobPath(layerDigest), Mode: 0o644, Size: info.Size(), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, layer); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func descriptor(mediaType string, content []byte) map[string]any {
	sum := sha256.Sum256(content)
	return map[string]any{"mediaType": mediaType, "digest": "sha256:" + hex.EncodeToString(sum[:]), "size": len(content)}
}

func blobPath(digest string) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
