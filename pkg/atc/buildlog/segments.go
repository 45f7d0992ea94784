package buildlog

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/db"
)

// Group commit across builds: every running build's log flushes its
// pending records as one part (a zstd frame of its own), and a
// segmentWriter writes the parts waiting at that moment, whatever their
// builds, as one segment object, then indexes them (one statement, all or
// none) before any of their flushes returns. A blobstore takes a bounded
// number of writes a second (MinIO on the development VM about 150),
// however small: one object per build per flush bound a thousand running
// builds by that number; one object per segment does not.
//
// There is no goroutine of its own: the flushes take turns writing. A
// flush whose part is queued takes a free write slot and writes everything
// queued, its own part and the others'; with every slot busy the parts
// gather until one frees, so segments grow with the load and a lone flush
// (someone waiting in sync) is written at once, with no gathering delay.
type segmentWriter struct {
	store blobstore.Store
	index Index
	// prefix is where segments go, e.g. atc/segments/.
	prefix string
	// slots holds a token per segment write in flight.
	slots chan struct{}

	mu    sync.Mutex
	queue []*segmentPart
}

// segmentWrites is how many segment writes may be in flight at once: a few
// overlap the store's latency, more would only split the parts waiting
// into smaller segments.
const segmentWrites = 3

// maxSegmentBytes bounds a segment's size; parts beyond it wait for the
// next write.
const maxSegmentBytes = 16 << 20

// segmentTimeout bounds one segment's write and index. A write holds other
// builds' parts, so it is not ended by the context of the flush that
// happens to run it; it is as long as a log's last flush at shutdown may
// take, so a stopping server waits no longer for it than before segments.
const segmentTimeout = 30 * time.Second

// segmentPart is one build's chunk waiting for a segment.
type segmentPart struct {
	buildID     int64
	first, last uint64
	data        []byte // a complete zstd frame
	contents    db.ChunkContents
	// taken is set (under segmentWriter.mu) once a write holds the part.
	taken bool
	// done is closed once err says how the part's write ended.
	done chan struct{}
	err  error
}

// newSegmentWriter writes segments under prefix, at most writes at once.
func newSegmentWriter(store blobstore.Store, index Index, prefix string, writes int) *segmentWriter {
	return &segmentWriter{store: store, index: index, prefix: prefix, slots: make(chan struct{}, writes)}
}

// commit returns once p is stored and indexed, or why it is not. After an
// error p may have been stored and indexed all the same (a lost answer,
// ctx ending while its segment is written): the caller writes its records
// again, as a part starting at the same record, which replaces p in the
// index.
func (w *segmentWriter) commit(ctx context.Context, p *segmentPart) error {
	w.mu.Lock()
	w.queue = append(w.queue, p)
	w.mu.Unlock()
	for {
		w.mu.Lock()
		taken := p.taken
		w.mu.Unlock()
		if taken {
			// Another flush writes it.
			select {
			case <-p.done:
				return p.err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		select {
		case <-p.done:
			return p.err
		case <-ctx.Done():
			w.withdraw(p)
			return ctx.Err()
		case w.slots <- struct{}{}:
			if batch := w.take(); len(batch) > 0 {
				w.write(ctx, batch)
			}
			<-w.slots
		}
	}
}

// take removes the parts of the next segment from the queue.
func (w *segmentWriter) take() []*segmentPart {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, size := 0, 0
	for n < len(w.queue) && (n == 0 || size+len(w.queue[n].data) <= maxSegmentBytes) {
		size += len(w.queue[n].data)
		w.queue[n].taken = true
		n++
	}
	batch := slices.Clone(w.queue[:n])
	w.queue = slices.Delete(w.queue, 0, n)
	return batch
}

// withdraw removes p from the queue unless a write holds it.
func (w *segmentWriter) withdraw(p *segmentPart) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if i := slices.Index(w.queue, p); i >= 0 {
		w.queue = slices.Delete(w.queue, i, i+1)
	}
}

// write stores parts as one segment, indexes them, and tells their flushes.
func (w *segmentWriter) write(ctx context.Context, parts []*segmentPart) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), segmentTimeout)
	defer cancel()
	err := w.writeSegment(ctx, parts)
	for _, p := range parts {
		p.err = err
		close(p.done)
	}
}

func (w *segmentWriter) writeSegment(ctx context.Context, parts []*segmentPart) error {
	key, err := w.newKey()
	if err != nil {
		return err
	}
	size := 0
	for _, p := range parts {
		size += len(p.data)
	}
	// A lone part (one build printing fast) is the segment as it is.
	var body []byte
	if len(parts) > 1 {
		body = make([]byte, 0, size)
	}
	chunks := make([]db.BuildEventChunk, len(parts))
	offset := 0
	for i, p := range parts {
		chunks[i] = db.BuildEventChunk{BuildID: p.buildID, EventChunk: db.EventChunk{
			FirstID: p.first, LastID: p.last, Key: key, Offset: int64(offset), Length: int64(len(p.data)), Contents: p.contents}}
		offset += len(p.data)
		if len(parts) > 1 {
			body = append(body, p.data...)
		}
	}
	if len(parts) == 1 {
		body = parts[0].data
	}
	if _, err := w.store.Put(ctx, key, bytes.NewReader(body), int64(len(body)), blobstore.PutOptions{ContentType: "application/zstd"}); err != nil {
		return fmt.Errorf("write build log segment %s (%d builds' chunks): %w", key, len(parts), err)
	}
	// Indexed only once stored: a reader never finds a part that is not there.
	if err := w.index.AddEventSegment(ctx, chunks); err != nil {
		return fmt.Errorf("index build log segment %s (%d builds' chunks): %w", key, len(parts), err)
	}
	return nil
}

// newKey names a segment uniquely across restarts and servers: by time,
// for people listing the bucket, and at random, for uniqueness.
func (w *segmentWriter) newKey() (string, error) {
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("name a build log segment: %w", err)
	}
	return fmt.Sprintf("%s%s-%s.zst", w.prefix, time.Now().UTC().Format("20060102T150405.000000000Z"), hex.EncodeToString(r[:])), nil
}

// MemIndex indexes build log chunks in memory, for a sink with no
// database (atc.LogSink). It behaves as the database's index does (AddEventSegment all
// or none, a retried chunk replacing the one it extends), so the
// benchmarks drive the same segment path as a server, which adds one
// database statement (its own transaction) per segment.
type MemIndex struct {
	mu     sync.Mutex
	chunks map[int64][]db.EventChunk // by build, in record order
}

// NewMemIndex returns an empty index.
func NewMemIndex() *MemIndex { return &MemIndex{chunks: map[int64][]db.EventChunk{}} }

// AddEventChunk implements Index.
func (m *MemIndex) AddEventChunk(_ context.Context, buildID int64, firstID, lastID uint64, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cs := m.chunks[buildID]
	i, found := slices.BinarySearchFunc(cs, firstID, func(c db.EventChunk, first uint64) int { return cmp.Compare(c.FirstID, first) })
	if found {
		return fmt.Errorf("add event chunk %d-%d of build %d: %w", firstID, lastID, buildID, db.ErrConflict)
	}
	m.chunks[buildID] = slices.Insert(cs, i, db.EventChunk{FirstID: firstID, LastID: lastID, Key: key})
	return nil
}

// AddEventSegment implements Index.
func (m *MemIndex) AddEventSegment(_ context.Context, chunks []db.BuildEventChunk) error {
	for _, c := range chunks {
		if c.LastID < c.FirstID {
			return fmt.Errorf("add event chunks of segment %s: chunk %d-%d of build %d ends before it starts", c.Key, c.FirstID, c.LastID, c.BuildID)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range chunks {
		cs := m.chunks[c.BuildID]
		i, found := slices.BinarySearchFunc(cs, c.FirstID, func(e db.EventChunk, first uint64) int { return cmp.Compare(e.FirstID, first) })
		switch {
		case !found:
			m.chunks[c.BuildID] = slices.Insert(cs, i, c.EventChunk)
		case cs[i].LastID <= c.LastID:
			cs[i] = c.EventChunk
		}
	}
	return nil
}

// EventChunks implements Index.
func (m *MemIndex) EventChunks(_ context.Context, buildID int64) ([]db.EventChunk, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.chunks[buildID]), nil
}
