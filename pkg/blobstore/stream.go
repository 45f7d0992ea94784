package blobstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/google/uuid"
)

// UploadStream stores an already-encoded artifact stream (tar through zstd,
// as a client produces it) under its content address, with the same staging
// and atomicity as UploadDir.
func UploadStream(ctx context.Context, store Store, r io.Reader) (Artifact, error) {
	staging := StagingKey(uuid.NewString())
	h := sha256.New()
	body := &countingReader{r: io.TeeReader(r, h)}
	if _, err := store.Put(ctx, staging, body, -1, PutOptions{ContentType: ArtifactContentType}); err != nil {
		return Artifact{}, fmt.Errorf("upload artifact stream: %w", err)
	}
	a := Artifact{Size: body.n, Digest: "sha256:" + hex.EncodeToString(h.Sum(nil))}
	a.Key = ArtifactKey(a.Digest)
	if err := promote(ctx, store, staging, a.Key, true); err != nil {
		return Artifact{}, fmt.Errorf("upload artifact stream: %w", err)
	}
	return a, nil
}
