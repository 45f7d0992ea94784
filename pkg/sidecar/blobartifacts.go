package sidecar

import (
	"bytes"
	"context"
	"errors"

	"github.com/porter-ci/porter/pkg/blobstore"
)

// SoftMemoryLimit is the Go runtime's memory limit in the sidecar unless
// GOMEMLIMIT sets another. Moving an artifact keeps about 26 MiB live (the
// upload's part buffers); without a limit the heap grows to twice that
// between collections, which are rare because little else is allocated. The
// binary's own pages (~17 MiB) come on top, so the sidecar stays under
// 64 MiB resident whatever the artifact's size. A large download's ranges
// (48 MiB, blobstore's default) go above the limit but cost no collector
// work: they are reused, so a 1 GiB download runs about 2 collections.
// Smaller ranges saved 5 MiB of peak RSS and cost ~5% of download speed
// (bench-sidecar, bench-artifacts), so the sidecar keeps the default.
const SoftMemoryLimit = 40 << 20

// BlobArtifacts adapts a blobstore.Store to what the sidecar needs: outputs
// go to fresh keys under the step's blob prefix (the ATC gives them their
// content address), downloads are extracted within limits. Audit objects
// are staged in the same bucket: the step's credentials cannot write the
// audit trail.
func BlobArtifacts(store blobstore.Store, team, stepID string, limits blobstore.ExtractLimits) Artifacts {
	// Small buffers whatever the artifact's size: the step's memory limit
	// covers the sidecar too. 3 parts of 8 MiB in flight still keep a local
	// MinIO busy.
	up := blobstore.UploadOptions{PartSize: 8 << 20, Concurrency: 3, EncoderConcurrency: 2, LowMemory: true}
	return blobArtifacts{store: store, team: team, owner: stepID, limits: limits, upload: up}
}

type blobArtifacts struct {
	store  blobstore.Store
	team   string
	owner  string
	limits blobstore.ExtractLimits
	upload blobstore.UploadOptions
}

func fromBlob(a blobstore.Artifact) Artifact {
	return Artifact{Key: a.Key, Size: a.Size, Digest: a.Digest}
}

func (b blobArtifacts) Download(ctx context.Context, key, digest, dir string) (Artifact, error) {
	a, err := blobstore.DownloadDirLimited(ctx, b.store, key, digest, dir, b.limits)
	return fromBlob(a), err
}

func (b blobArtifacts) Upload(ctx context.Context, dir string) (Artifact, error) {
	a, err := blobstore.UploadDir(ctx, b.store, dir, blobstore.NewBlobKey(b.team, b.owner), b.upload)
	return fromBlob(a), err
}

func (b blobArtifacts) UploadTo(ctx context.Context, dir, key string) (Artifact, error) {
	a, err := blobstore.UploadDir(ctx, b.store, dir, key, b.upload)
	return fromBlob(a), err
}

func (b blobArtifacts) Exists(ctx context.Context, key string) (bool, error) {
	return exists(ctx, b.store, key)
}

func exists(ctx context.Context, store blobstore.Store, key string) (bool, error) {
	_, err := store.Stat(ctx, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, blobstore.ErrNotFound):
		return false, nil
	default:
		return false, err
	}
}

func (b blobArtifacts) PutAudit(ctx context.Context, key string, body []byte, contentType string) error {
	_, err := b.store.Put(ctx, key, bytes.NewReader(body), int64(len(body)), blobstore.PutOptions{ContentType: contentType, IfAbsent: true})
	return err
}
