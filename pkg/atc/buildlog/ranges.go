package buildlog

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
)

// Reading a stored log by range: the build page of a huge log opens at a
// step's last lines and pages from there, and searches the whole log on
// the server. Each read takes only the chunks it needs (the index says
// which steps' output a chunk holds and whether it holds other events),
// holds one chunk at a time, and ends at a bound of its own: lines, hits,
// bytes read or time, answering where to go on from.

// Output is one log event of a step: a piece of its output, which may hold
// several lines or a part of one.
type Output struct {
	// ID is the record's, the position of the piece in the build's log.
	ID      uint64 `json:"id"`
	Time    int64  `json:"time"`
	Payload string `json:"payload"`
}

// Page is a step's output in records From to To (inclusive), in order.
type Page struct {
	From, To uint64
	// Start and End say that the stored log holds none of the step's
	// output before From, or after To (as stored now).
	Start, End bool
	Logs       []Output
}

// PageQuery asks for a step's output by range.
type PageQuery struct {
	// Origin is the step's plan id.
	Origin string
	// Before asks for the output just before that record, After for the
	// output just after it; neither (both 0) for the output at the end.
	Before, After uint64
	// Lines is how many lines to read at least (a piece is never cut).
	Lines int
}

// pageScanBytes bounds the stored bytes one page reads, so that looking
// for a step's output across a log where other steps printed gigabytes
// ends: the page answers what it found and where to go on.
const pageScanBytes = 64 << 20

// Page reads a step's output by range from a build's stored log.
func (ls *Logs) Page(ctx context.Context, buildID int64, q PageQuery) (Page, error) {
	if q.Before > 0 && q.After > 0 {
		return Page{}, errors.New("read a build log page: before and after both given")
	}
	src := ls.source(buildID)
	chunks, err := src.list(ctx)
	if err != nil {
		return Page{}, err
	}
	if q.After > 0 {
		return forwardPage(ctx, src, chunks, q)
	}
	return backwardPage(ctx, src, chunks, q)
}

// holds says whether a chunk may hold the output of origin.
func holds(c db.EventChunk, origin string) bool {
	return !c.Contents.Known || slices.Contains(c.Contents.Origins, origin)
}

// stepOutput decodes r as origin's output (ok false: it is not).
func stepOutput(r Record, origin string) (Output, bool, error) {
	if r.Event == nil || r.Event.Event != events.EventTypeLog {
		return Output{}, false, nil
	}
	var lg events.Log
	if err := json.Unmarshal(r.Event.Data, &lg); err != nil {
		return Output{}, false, fmt.Errorf("decode log event %d: %w", r.ID, err)
	}
	if origin != "" && lg.Origin.ID != origin {
		return Output{}, false, nil
	}
	return Output{ID: r.ID, Time: lg.Time, Payload: lg.Payload}, true, nil
}

// chunkEnd is the last record a chunk may be taken for: its own last, or
// the one before where the next chunk begins (a chunk ends where the next
// begins).
func chunkEnd(chunks []db.EventChunk, i int) uint64 {
	end := chunks[i].LastID
	switch {
	case i+1 < len(chunks) && (end == 0 || end >= chunks[i+1].FirstID):
		end = chunks[i+1].FirstID - 1
	case end == 0:
		end = math.MaxUint64 // not indexed: the chunk says
	}
	return end
}

func backwardPage(ctx context.Context, src chunkSource, chunks []db.EventChunk, q PageQuery) (Page, error) {
	var last uint64
	if n := len(chunks); n > 0 {
		last = chunkEnd(chunks, n-1)
	}
	before := q.Before
	if before == 0 || before > last {
		before = min(last, math.MaxUint64-1) + 1
	}
	p := Page{To: before - 1, From: before, End: q.Before == 0 || before > last}
	var newlines int
	var scanned int64
	for i := len(chunks) - 1; i >= 0; i-- {
		c := chunks[i]
		if c.FirstID >= before {
			continue
		}
		if !holds(c, q.Origin) {
			p.From = c.FirstID
			continue
		}
		if scanned >= pageScanBytes {
			p.Logs = reverse(p.Logs)
			return p, nil
		}
		recs, err := readChunk(ctx, src.store, c)
		if err != nil {
			return Page{}, err
		}
		scanned += max(c.Length, 1)
		end := chunkEnd(chunks, i)
		for j := len(recs) - 1; j >= 0; j-- {
			r := recs[j]
			if r.ID >= before || r.ID > end || r.ID < c.FirstID {
				continue
			}
			out, ok, err := stepOutput(r, q.Origin)
			if err != nil {
				return Page{}, err
			}
			if !ok {
				continue
			}
			p.Logs = append(p.Logs, out)
			p.From = r.ID
			newlines += strings.Count(out.Payload, "\n")
			if newlines > q.Lines {
				p.Logs = reverse(p.Logs)
				return p, nil
			}
		}
		p.From = c.FirstID
	}
	p.Start = true
	p.Logs = reverse(p.Logs)
	return p, nil
}

func forwardPage(ctx context.Context, src chunkSource, chunks []db.EventChunk, q PageQuery) (Page, error) {
	p := Page{From: q.After + 1, To: q.After}
	var newlines int
	var scanned int64
	for i, c := range chunks {
		end := chunkEnd(chunks, i)
		if end <= q.After && i+1 < len(chunks) {
			continue
		}
		if !holds(c, q.Origin) {
			p.To = max(p.To, end)
			continue
		}
		if scanned >= pageScanBytes {
			return p, nil
		}
		recs, err := readChunk(ctx, src.store, c)
		if err != nil {
			return Page{}, err
		}
		scanned += max(c.Length, 1)
		for _, r := range recs {
			if r.ID <= q.After || r.ID > end {
				continue
			}
			p.To = r.ID
			out, ok, err := stepOutput(r, q.Origin)
			if err != nil {
				return Page{}, err
			}
			if !ok {
				continue
			}
			p.Logs = append(p.Logs, out)
			newlines += strings.Count(out.Payload, "\n")
			if newlines > q.Lines {
				return p, nil
			}
		}
	}
	p.End = true
	return p, nil
}

func reverse[T any](s []T) []T {
	slices.Reverse(s)
	return s
}

// Outline reads a build's stored events but its steps' output (statuses,
// versions, errors): what a page needs to show a build's steps without
// reading their output. Last is the last stored record, Stored the stored
// size of the log (0: not known, chunks written before segments).
func (ls *Logs) Outline(ctx context.Context, buildID int64) (recs []Record, last uint64, stored int64, err error) {
	src := ls.source(buildID)
	chunks, err := src.list(ctx)
	if err != nil {
		return nil, 0, 0, err
	}
	for i, c := range chunks {
		stored += c.Length
		last = max(last, c.LastID)
		if c.Contents.Known && !c.Contents.Other {
			continue
		}
		got, err := readChunk(ctx, src.store, c)
		if err != nil {
			return nil, 0, 0, err
		}
		end := chunkEnd(chunks, i)
		for _, r := range got {
			last = max(last, r.ID)
			if r.Event == nil || r.ID > end || r.ID < c.FirstID {
				continue
			}
			if r.Event.Event == events.EventTypeLog {
				// Output of no step is shown with the others (contentsOf).
				var lg events.Log
				if err := json.Unmarshal(r.Event.Data, &lg); err != nil || lg.Origin.ID != "" {
					continue
				}
			}
			recs = append(recs, r)
		}
	}
	return recs, last, stored, nil
}

// Hit is a line of a step's output that holds what was searched for: the
// line that ends (or, at the log's end, stops) in the K-th newline of
// record ID's piece (K counts from 0; a line that stops counts the
// newlines before it).
type Hit struct {
	Origin string `json:"step"`
	ID     uint64 `json:"id"`
	K      int    `json:"k"`
	Time   int64  `json:"time"`
	// Text is the line (its part around the match, for a long one), as
	// stored: credentials are redacted there.
	Text string `json:"text"`
}

// SearchQuery asks for the lines of a build's output that hold Text.
type SearchQuery struct {
	Text string
	// Origin limits the search to a step's output ("": every step's).
	Origin string
	// From goes on where an earlier search stopped (zero: from the start).
	From SearchCursor
	// Hits bounds the hits answered (a search stops after a record's
	// hits, so it may answer a few more); Budget the time spent (0: no
	// bound).
	Hits   int
	Budget time.Duration
}

// SearchCursor is where a search goes on: after record After, leaving out
// the hits up to (PastID, PastK), which the last search answered (it
// stopped inside lines begun before, which are searched again whole).
type SearchCursor struct {
	After, PastID uint64
	PastK         int
}

// SearchResult is a search's hits in log order; More says the hits or the
// time ran out before the log's end, and Next is where to go on.
type SearchResult struct {
	Hits []Hit
	More bool
	Next SearchCursor
}

// searchLineBytes bounds the part of a line a search keeps while the line
// is not over: a longer line is searched in parts of this size.
const searchLineBytes = 64 << 10

// ansiCode matches the terminal escapes in output (colors, links), which a
// search looks through as a reader does.
var ansiCode = regexp.MustCompile("\x1b\\[[0-9;?]*[ -/]*[@-~]|\x1b\\][^\x07\x1b]*(\x07|\x1b\\\\)")

// openLine is a step's line not yet over, as a search keeps it.
type openLine struct {
	text string
	// start is the record of its first piece; id and k where it is now.
	start, id uint64
	k         int
	time      int64
}

// Search scans a build's stored output for lines that hold q.Text (case
// insensitive, escapes left out), one chunk at a time, until the end, the
// hits cap, the time budget or ctx ends.
func (ls *Logs) Search(ctx context.Context, buildID int64, q SearchQuery) (SearchResult, error) {
	if q.Text == "" {
		return SearchResult{}, errors.New("search a build log: nothing to search for")
	}
	src := ls.source(buildID)
	chunks, err := src.list(ctx)
	if err != nil {
		return SearchResult{}, err
	}
	needle := strings.ToLower(q.Text)
	var deadline time.Time
	if q.Budget > 0 {
		deadline = time.Now().Add(q.Budget)
	}
	open := map[string]*openLine{} // each step's line not yet over
	var res SearchResult
	match := func(origin, line string, id uint64, k int, t int64) {
		if id < q.From.PastID || (id == q.From.PastID && k <= q.From.PastK) {
			return // answered before
		}
		plain := line
		if strings.Contains(line, "\x1b") {
			plain = ansiCode.ReplaceAllString(line, "")
		}
		if at := strings.Index(strings.ToLower(plain), needle); at >= 0 {
			res.Hits = append(res.Hits, Hit{Origin: origin, ID: id, K: k, Time: t, Text: around(plain, at, len(needle))})
		}
	}
	// stop answers the hits so far, to go on after record at: from the
	// start of the lines still open, leaving out the hits answered.
	stop := func(at uint64) SearchResult {
		next := at
		for _, o := range open {
			if o.text != "" && o.start > q.From.After {
				next = min(next, o.start-1)
			}
		}
		res.More, res.Next = true, SearchCursor{After: next, PastID: q.From.PastID, PastK: q.From.PastK}
		if n := len(res.Hits); n > 0 {
			res.Next.PastID, res.Next.PastK = res.Hits[n-1].ID, res.Hits[n-1].K
		}
		return res
	}
	read := false
	for i, c := range chunks {
		end := chunkEnd(chunks, i)
		if end <= q.From.After {
			continue
		}
		if c.Contents.Known && (len(c.Contents.Origins) == 0 || (q.Origin != "" && !slices.Contains(c.Contents.Origins, q.Origin))) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return SearchResult{}, fmt.Errorf("search build %d's log: %w", buildID, context.Cause(ctx))
		}
		if read && !deadline.IsZero() && time.Now().After(deadline) {
			return stop(c.FirstID - 1), nil
		}
		recs, err := readChunk(ctx, src.store, c)
		if err != nil {
			return SearchResult{}, err
		}
		read = true
		for _, r := range recs {
			if r.ID <= q.From.After || r.ID > end || r.ID < c.FirstID || r.Event == nil || r.Event.Event != events.EventTypeLog {
				continue
			}
			var lg events.Log
			if err := json.Unmarshal(r.Event.Data, &lg); err != nil {
				return SearchResult{}, fmt.Errorf("decode log event %d: %w", r.ID, err)
			}
			origin := lg.Origin.ID
			if origin == "" || (q.Origin != "" && origin != q.Origin) {
				continue
			}
			o := open[origin]
			if o == nil {
				o = &openLine{}
				open[origin] = o
			}
			rest := lg.Payload
			for k := 0; ; k++ {
				nl := strings.IndexByte(rest, '\n')
				if nl < 0 {
					if o.text == "" {
						o.start, o.time = r.ID, lg.Time
					}
					o.text += rest
					o.id, o.k = r.ID, k
					if len(o.text) > searchLineBytes {
						match(origin, o.text, o.id, o.k, o.time)
						o.text = o.text[len(o.text)-len(needle):]
					}
					break
				}
				t := o.time
				if o.text == "" {
					t = lg.Time
				}
				match(origin, strings.TrimSuffix(o.text+rest[:nl], "\r"), r.ID, k, t)
				o.text, rest = "", rest[nl+1:]
			}
			if len(res.Hits) >= q.Hits && r.ID < chunkEnd(chunks, len(chunks)-1) {
				return stop(r.ID), nil
			}
		}
	}
	// The lines the log stops in.
	origins := make([]string, 0, len(open))
	for name, o := range open {
		if o.text != "" {
			origins = append(origins, name)
		}
	}
	slices.SortFunc(origins, func(a, b string) int { return cmp.Compare(open[a].id, open[b].id) })
	for _, name := range origins {
		o := open[name]
		match(name, o.text, o.id, o.k, o.time)
	}
	return res, nil
}

// hitContext is how much of a long line a hit shows around the match.
const hitContext = 120

// around is the part of line around the match at at (all of a short line).
func around(line string, at, n int) string {
	if len(line) <= 2*hitContext+n {
		return line
	}
	from, to := max(at-hitContext, 0), min(at+n+hitContext, len(line))
	// Cut on rune boundaries.
	for from > 0 && !utf8Start(line[from]) {
		from--
	}
	for to < len(line) && !utf8Start(line[to]) {
		to++
	}
	s := line[from:to]
	if from > 0 {
		s = "…" + s
	}
	if to < len(line) {
		s += "…"
	}
	return s
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
