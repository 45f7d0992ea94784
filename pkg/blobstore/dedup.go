package blobstore

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// Manifest is the object at ManifestKey: which blob holds the artifact with
// that digest.
type Manifest struct {
	Key    string `json:"key"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// IsManifestKey tells a manifest from an artifact blob under artifacts/
// (where blobs were kept before manifests existed).
func IsManifestKey(key string) bool {
	return strings.HasPrefix(key, "artifacts/") && strings.HasSuffix(key, ".json")
}

// ManifestContentType is the content type of manifests.
const ManifestContentType = "application/vnd.porter.artifact-manifest+json"

// maxManifestBytes bounds what a reader takes from a manifest object.
const maxManifestBytes = 4 << 10

// Dedup gives an uploaded blob its content address within team. If the
// team already has a live blob with the same digest and size, a's blob is
// deleted and the existing one returned; otherwise a's manifest is written
// and a returned. It is only the ATC that calls it, with its own access:
// steps upload blobs, the ATC decides what they are.
//
// Two byte-identical uploads racing may both keep their blobs: each is
// referenced by its own build, so nothing is lost, only not shared.
func Dedup(ctx context.Context, store Store, team string, a Artifact) (Artifact, error) {
	if a.Key == "" {
		return a, fmt.Errorf("dedup: not an uploaded artifact (no key; digest %q)", a.Digest)
	}
	if _, _, err := parseDigest(a.Digest); err != nil {
		return a, fmt.Errorf("dedup %q: not an uploaded artifact: %w", a.Key, err)
	}
	mkey := ManifestKey(team, a.Digest)
	m, err := ReadManifest(ctx, store, mkey)
	switch {
	case err == nil && m.Key == a.Key:
		return a, nil
	case err == nil && m.Digest == a.Digest && m.Size == a.Size:
		info, err := store.Stat(ctx, m.Key)
		if err == nil && info.Size == a.Size {
			deleteQuietly(ctx, store, a.Key)
			return Artifact{Key: m.Key, Size: a.Size, Digest: a.Digest}, nil
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			return a, fmt.Errorf("dedup %q: %w", a.Key, err)
		}
		// The manifest's blob is gone (collected): a's takes its place.
	case err != nil && !errors.Is(err, ErrNotFound):
		return a, fmt.Errorf("dedup %q: %w", a.Key, err)
	}
	body, err := json.Marshal(Manifest{Key: a.Key, Digest: a.Digest, Size: a.Size})
	if err != nil {
		return a, err
	}
	if _, err := store.Put(ctx, mkey, bytes.NewReader(body), int64(len(body)), PutOptions{ContentType: ManifestContentType}); err != nil {
		return a, fmt.Errorf("dedup %q: write manifest: %w", a.Key, err)
	}
	return a, nil
}

// DedupOrKeep is Dedup for callers that must not fail on it: the blob is
// intact whatever happened, so it is kept undeduplicated and the error
// logged.
func DedupOrKeep(ctx context.Context, store Store, team string, a Artifact, log *slog.Logger) Artifact {
	d, err := Dedup(ctx, store, team, a)
	if err != nil {
		log.WarnContext(ctx, "artifact kept without deduplication", "key", a.Key, "err", err)
		return a
	}
	return d
}

// Getter opens objects (a Store is one).
type Getter interface {
	Get(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error)
}

// ReadManifest reads the manifest at key.
func ReadManifest(ctx context.Context, store Getter, key string) (Manifest, error) {
	rc, _, err := store.Get(ctx, key)
	if err != nil {
		return Manifest{}, err
	}
	defer rc.Close()
	var m Manifest
	if err := json.NewDecoder(io.LimitReader(rc, maxManifestBytes)).Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("manifest %q: %w", key, err)
	}
	return m, nil
}

// ErrFileNotFound is wrapped by ReadFile when the artifact has no such file.
var ErrFileNotFound = errors.New("no such file in the artifact")

// ReadFile returns one regular file of the artifact at key (a task's
// `file:` from a fetched artifact) without extracting the rest: the stream
// is read until the file is found. Files larger than limit are refused, so
// a config file cannot make the server hold an artifact in memory.
func ReadFile(ctx context.Context, store Store, key, name string, limit int64) ([]byte, error) {
	want, err := cleanName(name)
	if err == nil && want == "" {
		err = fmt.Errorf("%w: %q names no file", ErrUnsafePath, name)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s from %q: %w", name, key, err)
	}
	rc, _, err := store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read %s from %q: %w", name, key, err)
	}
	defer rc.Close()
	stream, closeTar, err := openTar(ctxReader{ctx: ctx, r: rc},
		zstd.WithDecoderLowmem(true),
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(maxDecoderWindow),
		zstd.WithDecoderMaxMemory(maxDecoderMemory),
	)
	if err != nil {
		return nil, fmt.Errorf("read %s from %q: %w", name, key, err)
	}
	defer closeTar()
	tr := tar.NewReader(stream)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read %s from %q: %w", name, key, ErrFileNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s from %q: %w", name, key, err)
		}
		if path.Clean(hdr.Name) != want {
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("read %s from %q: it is not a regular file", name, key)
		}
		if hdr.Size > limit {
			return nil, fmt.Errorf("read %s from %q: it is %d bytes, more than the %d allowed", name, key, hdr.Size, limit)
		}
		data, err := io.ReadAll(io.LimitReader(tr, limit))
		if err != nil {
			return nil, fmt.Errorf("read %s from %q: %w", name, key, err)
		}
		return data, nil
	}
}
