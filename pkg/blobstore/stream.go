package blobstore

import (
	"context"
	"fmt"
	"io"
)

// UploadStream stores an already-encoded artifact stream (tar through zstd,
// as a client produces it) at key, with UploadDir's atomicity.
func UploadStream(ctx context.Context, store Store, key string, r io.Reader) (Artifact, error) {
	algo, h := newArtifactDigest()
	body := &countingReader{r: io.TeeReader(r, h)}
	if _, err := store.Put(ctx, key, body, -1, PutOptions{ContentType: ArtifactContentType}); err != nil {
		return Artifact{}, fmt.Errorf("upload artifact stream to %q: %w", key, err)
	}
	return Artifact{Key: key, Size: body.n, Digest: formatDigest(algo, h)}, nil
}
