// Package buildlog is the builds' event logs: each build's Log (appends in
// memory, group-committed to the blobstore, followed live or read back),
// and Logs, the machinery the builds' logs share (the chunk encoder, the
// memory window, the segment writer and the chunks' index).
package buildlog

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/porter-ci/porter/pkg/blobstore"
)

// Config is what the builds' logs are made of.
type Config struct {
	// Store holds the logs' chunks.
	Store blobstore.Store
	// Index indexes the chunks (the database's; MemIndex without one).
	// Nil: each chunk is an object of its own under its build's prefix,
	// found by listing the bucket, as before segments.
	Index Index
	Log   *slog.Logger
	// MaxBytes caps the output each build's log keeps (0: no cap), as
	// --max-build-log-bytes does.
	MaxBytes int64
}

// Logs opens the builds' logs. One serves all of a server's builds: they
// share its chunk encoder, their memory windows and its segment writer.
type Logs struct {
	store    blobstore.Store
	index    Index
	log      *slog.Logger
	maxBytes int64
	enc      *chunkEncoder
	// windows is what the running builds' memory windows share.
	windows windowShare
	// segments commits the chunks of all builds (nil without an index).
	segments *segmentWriter
}

// SegmentPrefix is where the build logs' segments go.
const SegmentPrefix = "atc/segments/"

// New returns the logs stored as cfg says.
func New(cfg Config) (*Logs, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	enc, err := newChunkEncoder()
	if err != nil {
		return nil, err
	}
	ls := &Logs{store: cfg.Store, index: cfg.Index, log: cfg.Log, maxBytes: cfg.MaxBytes, enc: enc}
	if cfg.Index != nil {
		ls.segments = newSegmentWriter(cfg.Store, cfg.Index, SegmentPrefix, segmentWrites)
	}
	return ls, nil
}

// Open returns a new build's empty log. It commits nothing until Run.
func (ls *Logs) Open(buildID int64) *Log {
	l := newBuildLog(ls.source(buildID), ls.log.With("build", buildID))
	l.maxBytes = ls.maxBytes
	return l
}

// Restore returns the log of a build begun before a restart: the IDs of
// its records go on after the stored ones.
func (ls *Logs) Restore(ctx context.Context, buildID int64) (*Log, error) {
	l, err := loadBuildLog(ctx, ls.source(buildID), ls.log.With("build", buildID))
	if err != nil {
		return nil, err
	}
	l.maxBytes = ls.maxBytes
	return l, nil
}

// Stored returns a build's durable records after ID after, read from the
// blobstore (a finished build's, or one another server runs).
func (ls *Logs) Stored(ctx context.Context, buildID int64, after uint64) ([]Record, error) {
	return readChunks(ctx, ls.source(buildID), after, 0)
}

// source is where a build's log lives: parts of segments under
// SegmentPrefix (before segments: chunk objects under atc/events/<build>/),
// indexed in the database.
func (ls *Logs) source(buildID int64) chunkSource {
	return chunkSource{store: ls.store, prefix: fmt.Sprintf("atc/events/%012d/", buildID), index: ls.index, buildID: buildID,
		enc: ls.enc, windows: &ls.windows, segments: ls.segments}
}
