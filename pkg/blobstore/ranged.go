package blobstore

import (
	"bufio"
	"context"
	"fmt"
	"hash"
	"io"
)

// Ranged reads of large objects: one GET stream is bounded by the server's
// and the client's per-stream speed (and minio-go's Object hands every Read
// to a goroutine), so an artifact is read as consecutive ranges, a few
// fetched at once, and served in order from memory.
const (
	// rangeChunk is the size of one ranged GET.
	rangeChunk = 8 << 20
	// rangeAhead is how many ranges are fetched at once; memory is about
	// (rangeAhead+2)×rangeChunk.
	rangeAhead = 4
)

// openObject opens an object for one sequential read: one GET, whose
// first part is read while the rest of a large object is fetched as ranges
// in parallel. Every byte read goes into h, in order; once the reader has
// returned io.EOF, h holds the whole object's.
func openObject(ctx context.Context, store Store, key string, h hash.Hash) (io.ReadCloser, error) {
	rc, info, err := store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("download %q: %w", key, err)
	}
	if info.Size < 2*rangeChunk {
		// The decoder reads a few bytes at a time (block headers); each
		// Read of a driver's body may cost a round trip between goroutines.
		buf := int64(1 << 20)
		if info.Size >= 0 { // -1: unknown
			buf = min(info.Size+1, buf)
		}
		return struct {
			io.Reader
			io.Closer
		}{io.TeeReader(bufio.NewReaderSize(rc, int(buf)), h), rc}, nil
	}
	return newRangeReader(ctx, store, key, rc, info.Size, rangeChunk, rangeAhead, h), nil
}

// rangeReader reads size bytes of an object as ranges of chunk bytes, up
// to ahead of them fetched at once, in order; the first range comes from
// first, the object's body already open (closed once read). A range that
// fails ends the read with its error.
//
// Each range is hashed as soon as it and the one before it are (a chain,
// so h sees the object in order), while the reader consumes the ranges
// before it: on a download the digest is a large share of the CPU (a
// SHA-256 one as much as everything else together), and this way it runs
// beside the decoding instead of in its way. A range's buffer is reused
// once it is both read and hashed.
type rangeReader struct {
	ctx    context.Context
	cancel context.CancelFunc
	parts  chan *rangePart // in object order; closed after the last
	free   chan []byte     // buffers to reuse
	size   int64
	read   int64
	cur    *rangePart
	off    int
	err    error
}

type rangePart struct {
	done   chan struct{} // closed once buf or err is set
	hashed chan struct{} // closed once buf is in the hash (or will never be)
	buf    []byte
	err    error
}

func newRangeReader(ctx context.Context, store Store, key string, first io.ReadCloser, size, chunk int64, ahead int, h hash.Hash) *rangeReader {
	ctx, cancel := context.WithCancel(ctx)
	r := &rangeReader{ctx: ctx, cancel: cancel, parts: make(chan *rangePart, ahead-1), free: make(chan []byte, ahead+2), size: size}
	go func() {
		defer close(r.parts)
		prevHashed := make(chan struct{})
		close(prevHashed)
		for off := int64(0); off < size; off += chunk {
			p := &rangePart{done: make(chan struct{}), hashed: make(chan struct{})}
			// Blocks while ahead ranges wait to be read: the bound on memory.
			select {
			case r.parts <- p:
			case <-ctx.Done():
				return
			}
			go func(off, n int64, prev <-chan struct{}) {
				defer close(p.hashed)
				if off == 0 {
					p.buf, p.err = r.readFirst(first, key, n)
				} else {
					p.buf, p.err = r.fetch(ctx, store, key, off, n)
				}
				close(p.done)
				if p.err != nil {
					return // the read ends with this error: the hash is moot
				}
				select {
				case <-prev:
					h.Write(p.buf)
				case <-ctx.Done():
				}
			}(off, min(chunk, size-off), prevHashed)
			prevHashed = p.hashed
		}
	}()
	return r
}

// buffer is a buffer of n bytes, reused when one is free.
func (r *rangeReader) buffer(n int64) []byte {
	var buf []byte
	select {
	case buf = <-r.free:
	default:
	}
	if int64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	return buf[:n]
}

// readFirst reads the first range from the object's open body, and lets
// the body go.
func (r *rangeReader) readFirst(body io.ReadCloser, key string, n int64) ([]byte, error) {
	defer body.Close()
	buf := r.buffer(n)
	if _, err := io.ReadFull(body, buf); err != nil {
		return nil, fmt.Errorf("get %q bytes 0+%d: %w", key, n, err)
	}
	return buf, nil
}

func (r *rangeReader) fetch(ctx context.Context, store Store, key string, off, n int64) ([]byte, error) {
	buf := r.buffer(n)
	body, err := store.GetRange(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	if _, err := io.ReadFull(body, buf); err != nil {
		return nil, fmt.Errorf("get %q bytes %d+%d: %w", key, off, n, err)
	}
	return buf, nil
}

func (r *rangeReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	for r.cur == nil || r.off == len(r.cur.buf) {
		if r.cur != nil {
			<-r.cur.hashed
			select {
			case r.free <- r.cur.buf:
			default:
			}
			r.cur = nil
		}
		next, ok := <-r.parts
		if !ok {
			switch {
			case r.read < r.size:
				// Closed early: the context ended.
				r.err = fmt.Errorf("read stopped after %d of %d bytes: %w", r.read, r.size, io.ErrUnexpectedEOF)
			case r.ctx.Err() != nil:
				// Every byte came, but a range may have missed the hash.
				r.err = fmt.Errorf("read all %d bytes, but not hashed them all: %w", r.size, context.Cause(r.ctx))
			default:
				r.err = io.EOF
			}
			return 0, r.err
		}
		<-next.done
		if next.err != nil {
			r.err = next.err
			return 0, r.err
		}
		r.cur, r.off = next, 0
	}
	n := copy(p, r.cur.buf[r.off:])
	r.off += n
	r.read += int64(n)
	return n, nil
}

// Close stops the fetches still running.
func (r *rangeReader) Close() error {
	r.cancel()
	return nil
}
