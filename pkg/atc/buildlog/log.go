package buildlog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
)

// Record is one entry of a build's log: a build event people see, and/or
// the sidecar sequence number it came from (so a reconnecting sidecar
// resumes after the last event that is durably stored).
type Record struct {
	ID    uint64           `json:"id"`
	Step  string           `json:"step,omitempty"`
	Seq   uint64           `json:"seq,omitempty"`
	Event *events.Envelope `json:"event,omitempty"`

	// origin is the plan id of the step whose output (a log event) the
	// record holds; other says it holds another event. They are known for
	// the records appended here, and say what a chunk holds (db.ChunkContents).
	origin string
	other  bool
}

// Log is a build's event log. Appends are cheap and in memory; a
// flusher commits them to the blobstore in groups, as chunk objects named by
// their first record ID, and Sync waits for that. A finished build's records
// are dropped from memory once durable and read back from the chunks.
type Log struct {
	src chunkSource
	log *slog.Logger

	mu      sync.Mutex
	records []Record // records[i].ID == base+i+1
	base    uint64   // records with ID <= base are not in memory
	durable uint64   // highest durable ID
	// durableBytes is the recordSize of the durable records in memory.
	durableBytes int64
	stepSeq      map[string]uint64
	changed      chan struct{}
	flushReq     chan struct{}
	// urgent asks for a flush without the group commit's gathering delay:
	// someone waits in sync (a sidecar for its acknowledgement, the end of
	// the build), so a commit now is worth more than a bigger one later.
	urgent    chan struct{}
	closed    bool
	flushErr  error
	evictable bool
	// secrets are the credential values the build's steps read; every
	// event appended after they were read shows ((redacted)) instead.
	secrets  []string
	redactor *creds.Redactor

	// maxBytes caps the output a build's log keeps (0: no cap); outBytes
	// counts it, and capped says the cap was reached (and announced).
	maxBytes int64
	outBytes int64
	capped   bool
}

// The memory window: the newest durable records of a running build stay
// in memory for live watchers, at most memoryWindow of them, holding at
// most the build's share of memoryWindows (recordSize); older ones are read
// back from the chunks. A build's memory does not grow with its log, and
// the running builds' windows together stay within twice memoryWindows
// (between evictions): one build printing fast keeps a large window for its
// watchers, a thousand builds keep small ones (where a count alone let them
// take most of a GiB).
const (
	memoryWindow           = 1024
	memoryWindows          = 32 << 20
	memoryWindowBytesLeast = 16 << 10
)

// windowShare counts the running builds' logs, which share memoryWindows
// (nil: a log counts as the only one).
type windowShare struct{ logs atomic.Int64 }

// bytes is one running build's share of memoryWindows.
func (w *windowShare) bytes() int64 {
	n := int64(1)
	if w != nil {
		n = max(w.logs.Load(), 1)
	}
	return max(memoryWindows/n, memoryWindowBytesLeast)
}

func (w *windowShare) add(n int64) {
	if w != nil {
		w.logs.Add(n)
	}
}

// recordSize approximates the memory a record holds: its event's JSON and
// the record and envelope around it.
func recordSize(r *Record) int64 {
	n := int64(48 + len(r.Step))
	if r.Event != nil {
		n += int64(64 + len(r.Event.Data) + len(r.Event.Event) + len(r.Event.Version))
	}
	return n
}

func newBuildLog(src chunkSource, log *slog.Logger) *Log {
	return &Log{src: src, log: log, stepSeq: map[string]uint64{},
		changed: make(chan struct{}), flushReq: make(chan struct{}, 1), urgent: make(chan struct{}, 1)}
}

// evictLocked drops durable records from memory: all of them once the
// build is over, else all but the memory window (in batches, once the
// durable records in memory are twice the window, so the copy that frees
// the old backing array is amortized).
func (l *Log) evictLocked() {
	n := int(l.durable - l.base) // durable records in memory
	if l.evictable && n == len(l.records) {
		l.base, l.records, l.durableBytes = l.durable, nil, 0
		return
	}
	window := l.src.windows.bytes()
	if n < 2*memoryWindow && l.durableBytes < 2*window {
		return
	}
	keep, kept := 0, int64(0)
	for keep < min(n, memoryWindow) {
		size := recordSize(&l.records[n-1-keep])
		if kept+size > window {
			break
		}
		keep, kept = keep+1, kept+size
	}
	drop := n - keep
	l.records = slices.Clone(l.records[drop:])
	l.base += uint64(drop)
	l.durableBytes = kept
}

// Index is the index of the builds' log chunks: the database's (pkg/db),
// or a MemIndex where there is none.
type Index interface {
	AddEventChunk(ctx context.Context, buildID int64, firstID, lastID uint64, key string) error
	// AddEventSegment records one segment's chunks, all or none.
	AddEventSegment(ctx context.Context, chunks []db.BuildEventChunk) error
	EventChunks(ctx context.Context, buildID int64) ([]db.EventChunk, error)
}

// chunkSource is where a build's log chunks live: objects under prefix,
// indexed in the database (when index is set) so reading a log needs no
// bucket listing.
type chunkSource struct {
	store   blobstore.Store
	prefix  string // e.g. atc/events/000000000042/
	index   Index
	buildID int64
	// enc encodes chunks (nil: an encoder of its own per chunk).
	enc *chunkEncoder
	// windows is what the build's memory window is a share of.
	windows *windowShare
	// segments commits the build's chunks together with other builds'
	// (nil: each chunk is an object of its own under prefix).
	segments *segmentWriter
}

// chunkEncoder turns records into a chunk's stored form: JSON lines,
// zstd-compressed. One serves all of a server's builds: a zstd encoder per
// chunk allocates megabytes, which a thousand running builds flushing many
// times a second turned into most of the server's CPU and memory. It
// encodes GOMAXPROCS chunks at a time, so flushes waiting their turn do not
// each hold their chunk's uncompressed JSON meanwhile.
type chunkEncoder struct {
	zstd  *zstd.Encoder
	slots chan struct{}
}

func newChunkEncoder() (*chunkEncoder, error) {
	n := runtime.GOMAXPROCS(0)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(n))
	if err != nil {
		return nil, fmt.Errorf("build log chunk encoder: %w", err)
	}
	return &chunkEncoder{zstd: enc, slots: make(chan struct{}, n)}, nil
}

// encode returns the chunk holding recs.
func (e *chunkEncoder) encode(ctx context.Context, recs []Record) ([]byte, error) {
	select {
	case e.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-e.slots }()
	var size int64
	for i := range recs {
		size += recordSize(&recs[i])
	}
	// recordSize exceeds a record's JSON but for escapes: raw is seldom grown.
	raw := make([]byte, 0, size)
	for i := range recs {
		raw = appendRecordJSON(raw, &recs[i])
	}
	return e.zstd.EncodeAll(raw, nil), nil
}

// encode returns the chunk holding recs.
func (c chunkSource) encode(ctx context.Context, recs []Record) ([]byte, error) {
	enc := c.enc
	if enc == nil {
		var err error
		if enc, err = newChunkEncoder(); err != nil {
			return nil, err
		}
		defer enc.zstd.Close()
	}
	return enc.encode(ctx, recs)
}

// list returns the build's chunks in record order.
func (c chunkSource) list(ctx context.Context) ([]db.EventChunk, error) {
	if c.index != nil {
		chunks, err := c.index.EventChunks(ctx, c.buildID)
		if err != nil {
			return nil, fmt.Errorf("list build log chunks: %w", err)
		}
		return chunks, nil
	}
	objs, err := c.store.List(ctx, c.prefix)
	if err != nil {
		return nil, fmt.Errorf("list build log chunks: %w", err)
	}
	var chunks []db.EventChunk
	for _, o := range objs {
		first, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(o.Key, c.prefix), ".jsonl.zst"), 10, 64)
		if err == nil {
			chunks = append(chunks, db.EventChunk{FirstID: first, Key: o.Key})
		}
	}
	return chunks, nil
}

// flushInterval bounds how long an event waits to be committed; it is the
// price of group commit in acknowledgement latency.
const flushInterval = 100 * time.Millisecond

func (l *Log) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// LastID is the ID of the newest record.
func (l *Log) LastID() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.base + uint64(len(l.records))
}

// append adds records, numbering them, and returns the last ID.
func (l *Log) append(recs ...Record) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range recs {
		r.ID = l.base + uint64(len(l.records)) + 1
		if r.Step != "" && r.Seq > l.stepSeq[r.Step] {
			l.stepSeq[r.Step] = r.Seq
		}
		l.records = append(l.records, r)
	}
	l.notifyLocked()
	select {
	case l.flushReq <- struct{}{}:
	default:
	}
	return l.base + uint64(len(l.records))
}

// Append adds one build event, with the build's credentials redacted, and
// returns its record's ID.
func (l *Log) Append(e events.Event) uint64 { return l.appendEvent(e, "", 0) }

// AppendStep records that a step's sidecar event seq arrived, with the
// build event it shows (nil: none, the record only keeps the step's resume
// point across a restart), and returns the record's ID.
func (l *Log) AppendStep(step string, seq uint64, e events.Event) uint64 {
	if e == nil {
		return l.append(Record{Step: step, Seq: seq})
	}
	return l.appendEvent(e, step, seq)
}

// appendEvent adds one build event, with the build's credentials redacted.
func (l *Log) appendEvent(e events.Event, step string, seq uint64) uint64 {
	origin, other := "", true
	if lg, ok := e.(events.Log); ok {
		shown, kept := l.capOutput(lg)
		if !kept {
			return l.append(Record{Step: step, Seq: seq})
		}
		// Output of no step is shown with the build's other events.
		e, origin, other = shown, lg.Origin.ID, lg.Origin.ID == ""
	}
	env, err := events.NewEnvelope(e)
	if err != nil {
		l.log.Error("encode build event", "err", err)
		return l.append(Record{Step: step, Seq: seq})
	}
	if red := l.Redactor(); red != nil {
		data, err := red.JSON(env.Data)
		if err != nil {
			// Never store an event that might show a credential.
			l.log.Error("redact build event", "event", env.Event, "err", err)
			return l.append(Record{Step: step, Seq: seq})
		}
		env.Data = data
	}
	return l.append(Record{Step: step, Seq: seq, Event: &env, origin: origin, other: other})
}

// capOutput counts a step's output against the build's cap. Past the cap
// the output is dropped (ok false); the event that crosses it is cut and
// says why, once.
func (l *Log) capOutput(e events.Log) (events.Log, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.maxBytes <= 0 {
		return e, true
	}
	if l.capped {
		return e, false
	}
	l.outBytes += int64(len(e.Payload))
	if l.outBytes <= l.maxBytes {
		return e, true
	}
	l.capped = true
	keep := int64(len(e.Payload)) - (l.outBytes - l.maxBytes)
	e.Payload = e.Payload[:max(keep, 0)] + fmt.Sprintf(
		"\n[porter] this build's log reached its cap of %d bytes (--max-build-log-bytes): further output is not kept; the steps go on\n", l.maxBytes)
	return e, true
}

// Redact hides values from every event appended from now on.
func (l *Log) Redact(values []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	added := false
	for _, v := range values {
		if !slices.Contains(l.secrets, v) {
			l.secrets = append(l.secrets, v)
			added = true
		}
	}
	if added {
		l.redactor = creds.NewRedactor(l.secrets)
	}
}

// SecretValues are the credential values the build has read so far (the
// sidecar redacts them from a step's audit journal).
func (l *Log) SecretValues() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.secrets)
}

// Redactor is nil while the build has read no credential.
func (l *Log) Redactor() *creds.Redactor {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.redactor
}

// Sync waits until every record appended so far is durable.
func (l *Log) Sync(ctx context.Context) error { return l.sync(ctx, l.LastID()) }

// sync waits until the record with ID id is durable.
func (l *Log) sync(ctx context.Context, id uint64) error {
	for {
		l.mu.Lock()
		done, ch, err := l.durable >= id, l.changed, l.flushErr
		l.mu.Unlock()
		if done {
			return nil
		}
		select {
		case l.urgent <- struct{}{}:
		default:
		}
		if err != nil && ctx.Err() == nil {
			// A failing store is retried by the flusher; report it while waiting.
			l.log.Warn("build log not yet durable", "err", err)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// StepDurable is the highest durable sidecar sequence number of a step.
func (l *Log) StepDurable(ctx context.Context, step string) (uint64, error) {
	l.mu.Lock()
	seq := l.stepSeq[step]
	last := l.base + uint64(len(l.records))
	l.mu.Unlock()
	if err := l.sync(ctx, last); err != nil {
		return 0, err
	}
	return seq, nil
}

// Run commits appended records until ctx ends, then once more.
func (l *Log) Run(ctx context.Context) {
	// A running build's log takes a share of memoryWindows until it ends.
	l.src.windows.add(1)
	defer l.src.windows.add(-1)
	ticker := time.NewTicker(flushInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			l.flush(fctx)
			cancel()
			return
		case <-l.flushReq:
			// Group commit: let a burst gather before writing, unless
			// someone is waiting for it.
			select {
			case <-time.After(flushInterval / 4):
			case <-l.urgent:
			case <-ctx.Done():
			}
		case <-l.urgent:
		case <-ticker.C:
		}
		l.flush(ctx)
		if l.isDone() {
			return
		}
	}
}

func (l *Log) isDone() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed && l.durable == l.base+uint64(len(l.records))
}

// Finish marks the log complete: after the last flush its records leave memory.
func (l *Log) Finish() {
	l.mu.Lock()
	l.closed, l.evictable = true, true
	l.mu.Unlock()
	select {
	case l.flushReq <- struct{}{}:
	default:
	}
}

func chunkKey(prefix string, firstID uint64) string {
	return fmt.Sprintf("%s%020d.jsonl.zst", prefix, firstID)
}

// flush writes the records not yet durable as one chunk: a part of a
// segment shared with other builds, or an object of its own.
func (l *Log) flush(ctx context.Context) {
	l.mu.Lock()
	from := l.durable
	pending := append([]Record(nil), l.records[from-l.base:]...)
	if len(pending) == 0 {
		l.evictLocked()
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	first, last := from+1, from+uint64(len(pending))
	data, err := l.src.encode(ctx, pending)
	if err != nil {
		l.setFlushErr(fmt.Errorf("encode build log chunk %d-%d: %w", first, last, err))
		return
	}
	var size int64
	for i := range pending {
		size += recordSize(&pending[i])
	}
	if l.src.segments != nil {
		// A retry after a failed commit goes into another segment with more
		// records; its index row replaces the failed one's, if that one was
		// indexed after all.
		part := &segmentPart{buildID: l.src.buildID, first: first, last: last, data: data, contents: contentsOf(pending), done: make(chan struct{})}
		if err := l.src.segments.commit(ctx, part); err != nil {
			l.setFlushErr(fmt.Errorf("commit build log chunk %d-%d: %w", first, last, err))
			return
		}
	} else if err := l.putChunk(ctx, first, last, data); err != nil {
		l.setFlushErr(err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.durable = last
	l.durableBytes += size
	l.flushErr = nil
	l.evictLocked()
	l.notifyLocked()
}

// contentsOf says what a chunk of recs holds.
func contentsOf(recs []Record) db.ChunkContents {
	c := db.ChunkContents{Known: true, Origins: []string{}}
	for i := range recs {
		r := &recs[i]
		c.Other = c.Other || r.other
		if r.origin != "" && !slices.Contains(c.Origins, r.origin) {
			c.Origins = append(c.Origins, r.origin)
		}
	}
	slices.Sort(c.Origins)
	return c
}

// putChunk writes a chunk as an object of its own, named by its first record.
func (l *Log) putChunk(ctx context.Context, first, last uint64, data []byte) error {
	// A retry after a failed write uses the same key with more records: the
	// later object is a superset, and readers skip IDs they have seen.
	key := chunkKey(l.src.prefix, first)
	if _, err := l.src.store.Put(ctx, key, bytes.NewReader(data), int64(len(data)), blobstore.PutOptions{ContentType: "application/zstd"}); err != nil {
		return fmt.Errorf("write build log chunk %s: %w", key, err)
	}
	if l.src.index != nil {
		// A chunk already indexed is the same key: the object above is its superset.
		err := l.src.index.AddEventChunk(ctx, l.src.buildID, first, last, key)
		if err != nil && !errors.Is(err, db.ErrConflict) {
			return fmt.Errorf("index build log chunk %s: %w", key, err)
		}
	}
	return nil
}

// appendRecordJSON appends r as one line of JSON, as json.Encoder writes
// it, except that the event's data is taken as it is: it is json.Marshal's
// output (events.NewEnvelope, redact.Redactor.JSON), compact and valid, and having
// encoding/json check and compact it again was the largest part of a
// flush's cost.
func appendRecordJSON(b []byte, r *Record) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, r.ID, 10)
	if r.Step != "" {
		b = append(b, `,"step":`...)
		b = appendJSONString(b, r.Step)
	}
	if r.Seq != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, r.Seq, 10)
	}
	if e := r.Event; e != nil {
		b = append(b, `,"event":{"data":`...)
		if len(e.Data) == 0 {
			b = append(b, "null"...)
		} else {
			b = append(b, e.Data...)
		}
		b = append(b, `,"event":`...)
		b = appendJSONString(b, string(e.Event))
		b = append(b, `,"version":`...)
		b = appendJSONString(b, e.Version)
		b = append(b, '}')
	}
	return append(b, "}\n"...)
}

// appendJSONString appends s quoted as encoding/json quotes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func (l *Log) setFlushErr(err error) {
	l.log.Warn("build log flush failed; will retry", "err", err)
	l.mu.Lock()
	l.flushErr = err
	l.mu.Unlock()
}

// Since returns the records after id and a channel closed on the next
// append. Records no longer in memory are read back from the blobstore.
//
// Only durable records are returned: a record a client saw must survive a
// crash, or a restarted server would number other events with its ID and a
// client resuming after it would miss them. The price is the group
// commit's delay (flushInterval at most).
func (l *Log) Since(ctx context.Context, id uint64) ([]Record, <-chan struct{}, error) {
	l.mu.Lock()
	base, ch := l.base, l.changed
	durable := l.records[:l.durable-base]
	var mem []Record
	if id >= base {
		if n := id - base; n < uint64(len(durable)) {
			mem = append(mem, durable[n:]...)
		}
	} else {
		mem = append(mem, durable...)
	}
	l.mu.Unlock()
	if id >= base {
		return mem, ch, nil
	}
	stored, err := readChunks(ctx, l.src, id, base)
	if err != nil {
		return nil, nil, err
	}
	return append(stored, mem...), ch, nil
}

// readChunks reads the durable records with after < ID <= upto (upto 0: all).
func readChunks(ctx context.Context, src chunkSource, after, upto uint64) ([]Record, error) {
	chunks, err := src.list(ctx)
	if err != nil {
		return nil, err
	}
	var out []Record
	last := after
	for i, c := range chunks {
		// A chunk ends where the next begins: skip chunks wholly at or before `after`.
		if i+1 < len(chunks) && chunks[i+1].FirstID <= after+1 {
			continue
		}
		if upto > 0 && c.FirstID > upto {
			break
		}
		recs, err := readChunk(ctx, src.store, c)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if r.ID <= last || (upto > 0 && r.ID > upto) {
				continue
			}
			if r.ID != last+1 {
				return nil, fmt.Errorf("build log %s: record %d follows %d", src.prefix, r.ID, last)
			}
			out = append(out, r)
			last = r.ID
		}
	}
	return out, nil
}

// readChunk reads a chunk: its part of a segment (one ranged read), or
// the whole object of a chunk written on its own.
func readChunk(ctx context.Context, store blobstore.Store, c db.EventChunk) ([]Record, error) {
	what := c.Key
	var rc io.ReadCloser
	var err error
	if c.Length > 0 {
		what = fmt.Sprintf("%s bytes %d+%d", c.Key, c.Offset, c.Length)
		rc, err = store.GetRange(ctx, c.Key, c.Offset, c.Length)
	} else {
		rc, _, err = store.Get(ctx, c.Key)
	}
	if err != nil {
		return nil, fmt.Errorf("read build log chunk %s: %w", what, err)
	}
	defer rc.Close()
	dec, err := zstd.NewReader(rc, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("read build log chunk %s: %w", what, err)
	}
	defer dec.Close()
	var out []Record
	sc := bufio.NewScanner(dec)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("decode build log chunk %s: %w", what, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return nil, fmt.Errorf("read build log chunk %s: %w", what, err)
	}
	return out, nil
}

// loadBuildLog restores a build's log after a restart: its last record ID
// and every step's resume point, read one chunk at a time. The records
// stay in the blobstore (Since reads them when someone watches), so a
// restart's memory does not grow with the logs it restores.
func loadBuildLog(ctx context.Context, src chunkSource, log *slog.Logger) (*Log, error) {
	l := newBuildLog(src, log)
	chunks, err := src.list(ctx)
	if err != nil {
		return nil, err
	}
	var last uint64
	for _, c := range chunks {
		recs, err := readChunk(ctx, src.store, c)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if r.ID <= last {
				continue // a retried chunk's repeat
			}
			if r.ID != last+1 {
				return nil, fmt.Errorf("build log %s: record %d follows %d", src.prefix, r.ID, last)
			}
			last = r.ID
			if r.Step != "" && r.Seq > l.stepSeq[r.Step] {
				l.stepSeq[r.Step] = r.Seq
			}
		}
	}
	l.base, l.durable = last, last
	return l, nil
}
