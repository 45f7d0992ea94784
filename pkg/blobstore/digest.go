package blobstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"

	"github.com/zeebo/blake3"
)

// Digest algorithms of artifact streams: the part of a digest
// "<algorithm>:<hex>" before the colon.
//
// New artifacts are digested with BLAKE3: a download is CPU-bound on a
// small node, and BLAKE3 verifies the stream at about twice the speed of
// SHA-256 (SHA-NI). Artifacts stored with SHA-256 digests before keep them,
// and downloads still check those.
const (
	DigestBLAKE3 = "blake3"
	DigestSHA256 = "sha256"
)

// newArtifactDigest is the algorithm and hash that new artifacts are
// digested with.
func newArtifactDigest() (string, hash.Hash) { return DigestBLAKE3, blake3.New() }

// digestHash returns a fresh hash of the named algorithm.
func digestHash(algo string) (hash.Hash, error) {
	switch algo {
	case DigestBLAKE3:
		return blake3.New(), nil
	case DigestSHA256:
		return sha256.New(), nil
	default:
		return nil, fmt.Errorf("unknown digest algorithm %q (want %s or %s)", algo, DigestBLAKE3, DigestSHA256)
	}
}

// parseDigest checks an artifact digest "<algorithm>:<hex>" (a known
// algorithm and 32 bytes in lower-case hex) and returns its algorithm and
// hex.
func parseDigest(digest string) (algo, sum string, err error) {
	algo, sum, ok := strings.Cut(digest, ":")
	if !ok {
		return "", "", fmt.Errorf("digest %q is not <algorithm>:<hex>", digest)
	}
	if _, err := digestHash(algo); err != nil {
		return "", "", fmt.Errorf("digest %q: %w", digest, err)
	}
	// Both algorithms give 32 bytes.
	if len(sum) != 64 || strings.Trim(sum, "0123456789abcdef") != "" {
		return "", "", fmt.Errorf("digest %q: want 64 lower-case hex digits after %q", digest, algo+":")
	}
	return algo, sum, nil
}

// downloadHash is the algorithm and hash a download digests its stream
// with: wantDigest's, or that of new artifacts when there is nothing to
// check against.
func downloadHash(wantDigest string) (string, hash.Hash, error) {
	if wantDigest == "" {
		algo, h := newArtifactDigest()
		return algo, h, nil
	}
	algo, _, err := parseDigest(wantDigest)
	if err != nil {
		return "", nil, err
	}
	h, err := digestHash(algo)
	return algo, h, err
}

// formatDigest is the digest of what h has seen.
func formatDigest(algo string, h hash.Hash) string {
	return algo + ":" + hex.EncodeToString(h.Sum(nil))
}
