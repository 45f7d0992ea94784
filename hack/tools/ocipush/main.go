// Command ocipush pushes OCI image archives (the tar of an OCI image layout that
// hack/tools/mkimage writes) to a registry over plain HTTP, for the local
// cluster's registry.
//
//	ocipush porter.tar=10.245.0.1:5000/porter:dev busybox.tar=10.245.0.1:5000/library/busybox:latest
//
// Each ARCHIVE=REFERENCE argument pushes the archive's one image under that tag.
// An image the registry already has under that tag, with the same digest, is not
// pushed again: a warm run costs one HEAD request per image. Blobs are read in
// place from the archive (no extraction), and the images are pushed in parallel.
// One line per image goes to stdout: REFERENCE@DIGEST and "pushed" or "unchanged".
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	fs := flag.NewFlagSet("ocipush", flag.ContinueOnError)
	jobs := fs.Int("jobs", 4, "images pushed at once")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ocipush [-jobs N] [-timeout D] ARCHIVE=REFERENCE...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	pushes, err := parsePushes(fs.Args())
	if err != nil {
		logger.Error("bad arguments", "err", err)
		fs.Usage()
		os.Exit(2)
	}
	if *jobs < 1 {
		logger.Error("bad arguments", "err", fmt.Errorf("-jobs must be at least 1, got %d", *jobs))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := pushAll(ctx, os.Stdout, pushes, *jobs); err != nil {
		logger.Error("push failed", "err", err)
		os.Exit(1)
	}
}

type push struct {
	archive string
	ref     name.Tag
}

func parsePushes(args []string) ([]push, error) {
	if len(args) == 0 {
		return nil, errors.New("no ARCHIVE=REFERENCE arguments")
	}
	var pushes []push
	for _, arg := range args {
		archive, ref, ok := strings.Cut(arg, "=")
		if !ok || archive == "" || ref == "" {
			return nil, fmt.Errorf("%q is not ARCHIVE=REFERENCE", arg)
		}
		// The registry is local and plain HTTP; StrictValidation refuses an
		// implicit docker.io or :latest, which would push somewhere unintended.
		tag, err := name.NewTag(ref, name.Insecure, name.StrictValidation)
		if err != nil {
			return nil, fmt.Errorf("reference %q of %s: %w", ref, archive, err)
		}
		pushes = append(pushes, push{archive: archive, ref: tag})
	}
	return pushes, nil
}

func pushAll(ctx context.Context, out io.Writer, pushes []push, jobs int) error {
	// The registry is on this host: a proxy from the environment must not be used.
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, jobs)
	)
	for _, p := range pushes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			line, err := pushOne(ctx, tr, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("push %s to %s: %w", p.archive, p.ref, err))
				return
			}
			fmt.Fprintln(out, line)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func pushOne(ctx context.Context, tr http.RoundTripper, p push) (string, error) {
	a, err := openArchive(p.archive)
	if err != nil {
		return "", err
	}
	defer a.Close()
	img, err := a.image()
	if err != nil {
		return "", err
	}
	digest, err := img.Digest()
	if err != nil {
		return "", fmt.Errorf("digest of the image: %w", err)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithTransport(tr)}
	have, err := remote.Head(p.ref, opts...)
	var terr *transport.Error
	switch {
	case err == nil && have.Digest == digest:
		return fmt.Sprintf("%s@%s unchanged", p.ref, digest), nil
	case err != nil && !(errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound):
		return "", fmt.Errorf("ask the registry for %s: %w", p.ref, err)
	}
	if err := remote.Write(p.ref, img, opts...); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s@%s pushed", p.ref, digest), nil
}

// archive is an OCI image layout inside an uncompressed tar. Every file is
// read in place, at the offset the tar reader found it.
type archive struct {
	path  string
	f     *os.File
	files map[string]*io.SectionReader
}

func openArchive(p string) (*archive, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("open archive: %w", err)
	}
	a := &archive{path: p, f: f, files: map[string]*io.SectionReader{}}
	// tar.Reader reads headers exactly and seeks past file contents, so the
	// file's offset after Next is where that entry's contents begin.
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("read archive %s: %w", p, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("read archive %s: %w", p, err)
		}
		a.files[path.Clean(hdr.Name)] = io.NewSectionReader(f, off, hdr.Size)
	}
	return a, nil
}

func (a *archive) Close() error { return a.f.Close() }

func (a *archive) readFile(name string) ([]byte, error) {
	s, ok := a.files[name]
	if !ok {
		return nil, fmt.Errorf("%s has no %s: not an OCI image layout archive", a.path, name)
	}
	return io.ReadAll(io.NewSectionReader(s, 0, s.Size()))
}

func (a *archive) blob(h v1.Hash) (*io.SectionReader, error) {
	s, ok := a.files[path.Join("blobs", h.Algorithm, h.Hex)]
	if !ok {
		return nil, fmt.Errorf("%s has no blob %s", a.path, h)
	}
	return s, nil
}

func (a *archive) readBlob(h v1.Hash) ([]byte, error) {
	s, err := a.blob(h)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.NewSectionReader(s, 0, s.Size()))
	if err != nil {
		return nil, fmt.Errorf("read blob %s of %s: %w", h, a.path, err)
	}
	got, _, err := v1.SHA256(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	if got != h {
		return nil, fmt.Errorf("blob %s of %s has digest %s", h, a.path, got)
	}
	return b, nil
}

// image returns the archive's one image manifest as a v1.Image whose blobs are
// read from the archive.
func (a *archive) image() (v1.Image, error) {
	raw, err := a.readFile("index.json")
	if err != nil {
		return nil, err
	}
	var index v1.IndexManifest
	if err := json.Unmarshal(raw, &index); err != nil {
		return nil, fmt.Errorf("parse index.json of %s: %w", a.path, err)
	}
	if len(index.Manifests) != 1 {
		return nil, fmt.Errorf("%s holds %d manifests; ocipush pushes archives of exactly one image", a.path, len(index.Manifests))
	}
	desc := index.Manifests[0]
	if !desc.MediaType.IsImage() {
		return nil, fmt.Errorf("%s: manifest %s has media type %s, not an image manifest", a.path, desc.Digest, desc.MediaType)
	}
	manifest, err := a.readBlob(desc.Digest)
	if err != nil {
		return nil, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(manifest))
	if err != nil {
		return nil, fmt.Errorf("parse manifest %s of %s: %w", desc.Digest, a.path, err)
	}
	config, err := a.readBlob(m.Config.Digest)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&archiveImage{a: a, mediaType: desc.MediaType, manifest: manifest, config: config, layers: m.Layers})
}

// archiveImage is the partial.CompressedImageCore of an archive's image. Its
// layers are pushed byte for byte as the archive holds them, whatever their
// compression ("compressed" is ggcr's word for the blob as stored).
type archiveImage struct {
	a         *archive
	mediaType types.MediaType
	manifest  []byte
	config    []byte
	layers    []v1.Descriptor
}

func (i *archiveImage) RawConfigFile() ([]byte, error)      { return i.config, nil }
func (i *archiveImage) MediaType() (types.MediaType, error) { return i.mediaType, nil }
func (i *archiveImage) RawManifest() ([]byte, error)        { return i.manifest, nil }
func (i *archiveImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, d := range i.layers {
		if d.Digest == h {
			s, err := i.a.blob(h)
			if err != nil {
				return nil, err
			}
			if s.Size() != d.Size {
				return nil, fmt.Errorf("blob %s of %s is %d bytes, the manifest says %d", h, i.a.path, s.Size(), d.Size)
			}
			return &archiveLayer{desc: d, blob: s}, nil
		}
	}
	return nil, fmt.Errorf("the image in %s has no layer %s", i.a.path, h)
}

type archiveLayer struct {
	desc v1.Descriptor
	blob *io.SectionReader
}

func (l *archiveLayer) Digest() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *archiveLayer) Size() (int64, error)                { return l.desc.Size, nil }
func (l *archiveLayer) MediaType() (types.MediaType, error) { return l.desc.MediaType, nil }
func (l *archiveLayer) Compressed() (io.ReadCloser, error) {
	// A fresh reader per call: remote.Write may retry an upload.
	return io.NopCloser(io.NewSectionReader(l.blob, 0, l.blob.Size())), nil
}
