package blobstore

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"

	"github.com/klauspost/compress/zstd"
)

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
