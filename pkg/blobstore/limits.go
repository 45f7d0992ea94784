package blobstore

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrExtractLimit is returned (wrapped, naming the cap) when an archive
// holds more than an extraction may write: a decompression bomb, or an
// artifact bigger than the worker allows.
var ErrExtractLimit = errors.New("extraction limit exceeded")

// Defaults of ExtractLimits: far above a sane artifact, far below a full
// node disk.
const (
	DefaultMaxExtractBytes int64 = 64 << 30
	DefaultMaxExtractFiles int64 = 2_000_000
)

// Environment variables that set a step pod's extraction caps (podspec sets
// them on the sidecar; ExtractLimitsFromEnv reads them).
const (
	EnvMaxExtractBytes = "PORTER_MAX_EXTRACT_BYTES"
	EnvMaxExtractFiles = "PORTER_MAX_EXTRACT_FILES"
)

// ExtractLimits cap one extraction. A zero field means its default.
type ExtractLimits struct {
	// MaxBytes is the most file content (the sum of regular files' sizes).
	MaxBytes int64
	// MaxFiles is the most entries: files, directories and links.
	MaxFiles int64
}

func (l ExtractLimits) withDefaults() ExtractLimits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxExtractBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxExtractFiles
	}
	return l
}

// ExtractLimitsFromEnv reads EnvMaxExtractBytes and EnvMaxExtractFiles
// through getenv (os.Getenv); unset means the default.
func ExtractLimitsFromEnv(getenv func(string) string) (ExtractLimits, error) {
	var l ExtractLimits
	for name, field := range map[string]*int64{EnvMaxExtractBytes: &l.MaxBytes, EnvMaxExtractFiles: &l.MaxFiles} {
		v := getenv(name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return ExtractLimits{}, fmt.Errorf("%s=%q: want a positive integer", name, v)
		}
		*field = n
	}
	return l, nil
}
