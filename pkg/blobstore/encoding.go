package blobstore

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"github.com/klauspost/compress/zstd"
)

// An artifact's stored stream is a tar, compressed with zstd unless its
// content does not compress (already compressed files: archives, images,
// jars). Decoding zstd frames that hold raw blocks costs a reader three
// copies of every byte for nothing, a third of a download's CPU.
//
// Readers tell the two apart by the first four bytes: every zstd frame
// starts with zstdMagic, and no tar that WriteTar writes does (its first
// header names a top-level entry; a directory's name ends "/\x00", a
// file's has no "/").
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// Compressibility sampling (compressible).
const (
	// Directories smaller than this are always compressed: the choice
	// saves nothing measurable there.
	minSampledBytes = 8 << 20
	// At most this many of the largest files are sampled, sampleBytes
	// from the middle of each.
	maxSampledFiles = 16
	sampleBytes     = 128 << 10
	// Directories with more regular files than this are compressed without
	// walking them to the end: the walk is a second one (the archiver's is
	// the first), 0.2 s for 100,000 files against 1.2 s for the tar, and
	// that many files are mostly small ones, so the largest few hold half
	// of the bytes only rarely.
	maxWalkedFiles = 10_000
)

// errManyFiles stops compressible's walk at maxWalkedFiles.
var errManyFiles = errors.New("more files than are worth sampling")

// compressible estimates whether dir's tar is worth compressing: samples
// from the middle of its largest regular files must shrink by a twentieth
// or more. Unless those files hold most of the bytes (many small files
// dominate, or there are more than maxWalkedFiles), it says yes:
// compression is the safe default, since a stream stored plain costs its
// full size in transfer and storage.
func compressible(ctx context.Context, dir string) (bool, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return false, fmt.Errorf("sample %s: %w", dir, err)
	}
	defer root.Close()
	type file struct {
		name string
		size int64
	}
	var files []file
	var total int64
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, file{name, info.Size()})
		total += info.Size()
		if len(files) > maxWalkedFiles {
			return errManyFiles
		}
		return nil
	})
	if errors.Is(err, errManyFiles) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("sample %s: %w", dir, err)
	}
	if total < minSampledBytes {
		return true, nil
	}
	slices.SortFunc(files, func(a, b file) int { return cmp.Compare(b.size, a.size) })
	files = files[:min(len(files), maxSampledFiles)]
	var covered int64
	var sample []byte
	for _, f := range files {
		covered += f.size
		chunk, err := readMiddle(root, f.name, f.size)
		if err != nil {
			return false, fmt.Errorf("sample %s: %w", dir, err)
		}
		sample = append(sample, chunk...)
	}
	if covered < total/2 || len(sample) == 0 {
		return true, nil
	}
	// As small as the sidecar's encoder: a sample is at most 2 MiB.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false), zstd.WithLowerEncoderMem(true), zstd.WithWindowSize(1<<20))
	if err != nil {
		return false, fmt.Errorf("zstd encoder: %w", err)
	}
	defer enc.Close()
	packed := enc.EncodeAll(sample, make([]byte, 0, len(sample)))
	return len(packed) <= len(sample)-len(sample)/20, nil
}

// readMiddle reads up to sampleBytes from the middle of a file of size.
func readMiddle(root *os.Root, name string, size int64) ([]byte, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n := min(size, sampleBytes)
	buf := make([]byte, n)
	got, err := f.ReadAt(buf, (size-n)/2)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:got], nil // shorter when the file shrank meanwhile
}

// openTar returns the tar inside an artifact's stored stream r: zstd
// frames decoded with opts, or a plain tar as it is. The func returned
// releases the decoder.
func openTar(r io.Reader, opts ...zstd.DOption) (io.Reader, func(), error) {
	br := bufio.NewReader(r)
	head, err := br.Peek(len(zstdMagic))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("read the artifact's first bytes: %w", err)
	}
	if !bytes.Equal(head, zstdMagic) {
		return fillReader{br}, func() {}, nil
	}
	dec, err := zstd.NewReader(br, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return dec, dec.Close, nil
}

// ArtifactTar returns the tar inside an artifact's stored stream r, whether
// compressed or not (see zstdMagic), decoded within the same bounds as
// DownloadDir. Closing it does not close r.
func ArtifactTar(r io.Reader) (io.ReadCloser, error) {
	tr, closeTar, err := openTar(r,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(maxDecoderWindow),
		zstd.WithDecoderMaxMemory(maxDecoderMemory))
	if err != nil {
		return nil, err
	}
	return tarReadCloser{tr, closeTar}, nil
}

type tarReadCloser struct {
	io.Reader
	close func()
}

func (t tarReadCloser) Close() error { t.close(); return nil }

// fillReader fills each read of a plain tar up to fillBytes before the
// stream's end. Unfilled, a read returns what one socket read (or bufio's
// leftover after a tar header) gave, and each becomes a write of an
// extracted file (a syscall) and a hash update.
type fillReader struct{ r io.Reader }

// fillBytes: chunks of 64–256 KiB stay in the CPU's cache from the socket
// through the hash to the page cache. Unfilled reads cost a 1 GiB download
// 2.5 s of CPU, 1 MiB chunks 3.8 s, 128 KiB ones 1.1 s (bench-artifacts).
const fillBytes = 128 << 10

func (f fillReader) Read(p []byte) (int, error) {
	n, err := io.ReadFull(f.r, p[:min(len(p), fillBytes)])
	if errors.Is(err, io.ErrUnexpectedEOF) || (n > 0 && errors.Is(err, io.EOF)) {
		err = nil // the next read says io.EOF
	}
	return n, err
}
