package blobstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

// rangeStore serves one object's ranges from memory, counting the ranges
// in flight; failAt makes the range at that offset fail.
type rangeStore struct {
	Store // the methods a rangeReader does not use
	data  []byte
	// failAt >= 0: the range starting there fails.
	failAt            int64
	inFlight, maxSeen atomic.Int64
}

var errRange = errors.New("range failed")

func (s *rangeStore) GetRange(ctx context.Context, _ string, off, n int64) (io.ReadCloser, error) {
	cur := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		seen := s.maxSeen.Load()
		if cur <= seen || s.maxSeen.CompareAndSwap(seen, cur) {
			break
		}
	}
	select { // long enough for the fetches to overlap
	case <-time.After(5 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if off == s.failAt {
		return nil, errRange
	}
	return io.NopCloser(bytes.NewReader(s.data[off : off+n])), nil
}

// An object read as parallel ranges comes out whole and in order, whatever
// the read sizes, with no more than `ahead` ranges fetched at once, and
// its ranges hashed in order beside the reads.
func TestRangeReaderInOrder(t *testing.T) {
	data := make([]byte, 10*1000+7) // not a multiple of the chunk
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	store := &rangeStore{data: data, failAt: -1}
	h := sha256.New()
	rr := newRangeReader(t.Context(), store, "k", io.NopCloser(bytes.NewReader(data[:1000])), int64(len(data)), 1000, 3, h)
	defer rr.Close()
	var got bytes.Buffer
	buf := make([]byte, 333)
	for {
		n, err := rr.Read(buf[:1+r.IntN(len(buf))])
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("read %d bytes differing from the object's %d", got.Len(), len(data))
	}
	if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Errorf("hash at EOF %x, want the object's %x", h.Sum(nil), want)
	}
	if m := store.maxSeen.Load(); m < 2 || m > 3 {
		t.Errorf("%d ranges fetched at once, want 2..3", m)
	}
}

// A failing range ends the read with its error, after the ranges before it.
func TestRangeReaderFails(t *testing.T) {
	data := bytes.Repeat([]byte{1}, 5000)
	rr := newRangeReader(t.Context(), &rangeStore{data: data, failAt: 3000}, "k", io.NopCloser(bytes.NewReader(data)), int64(len(data)), 1000, 2, sha256.New())
	defer rr.Close()
	n, err := io.Copy(io.Discard, rr)
	if !errors.Is(err, errRange) || n != 3000 {
		t.Fatalf("read %d bytes, err %v; want 3000 then the range's error", n, err)
	}
}

// A read whose context ends stops with an error, never a short EOF.
func TestRangeReaderCanceled(t *testing.T) {
	data := make([]byte, 50_000)
	ctx, cancel := context.WithCancel(t.Context())
	rr := newRangeReader(ctx, &rangeStore{data: data, failAt: -1}, "k", io.NopCloser(bytes.NewReader(data)), int64(len(data)), 1000, 2, sha256.New())
	defer rr.Close()
	if _, err := io.ReadFull(rr, make([]byte, 1500)); err != nil {
		t.Fatal(err)
	}
	cancel()
	n, err := io.Copy(io.Discard, rr)
	if err == nil || int64(n)+1500 >= int64(len(data)) {
		t.Fatalf("after the cancel: read %d more bytes, err %v; want an error before the end", n, err)
	}
}
