package stepbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/stepserver"
)

// counters are what the child tells on its stderr every few seconds, to
// see where the time goes: events in, syncs (acknowledgements) and their
// wait, chunk writes and their latency.
type counters struct {
	events, syncs, syncNanos, puts, putBytes, putNanos atomic.Int64
}

// countingSink counts a sink's events and syncs.
type countingSink struct {
	stepserver.Sink
	c *counters
}

func (s countingSink) Append(ctx context.Context, stepID string, evs []*eventspb.Event) error {
	s.c.events.Add(int64(len(evs)))
	return s.Sink.Append(ctx, stepID, evs)
}

func (s countingSink) Sync(ctx context.Context, stepID string, seq uint64) error {
	start := time.Now()
	err := s.Sink.Sync(ctx, stepID, seq)
	s.c.syncs.Add(1)
	s.c.syncNanos.Add(int64(time.Since(start)))
	return err
}

// countingStore counts a store's writes.
type countingStore struct {
	blobstore.Store
	c *counters
}

func (s countingStore) Put(ctx context.Context, key string, body io.Reader, size int64, opts blobstore.PutOptions) (blobstore.ObjectInfo, error) {
	start := time.Now()
	info, err := s.Store.Put(ctx, key, body, size, opts)
	s.c.puts.Add(1)
	s.c.putBytes.Add(size)
	s.c.putNanos.Add(int64(time.Since(start)))
	return info, err
}

// report prints the counters' rates every interval until ctx ends.
func (c *counters) report(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var prev [6]int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cur := [6]int64{c.events.Load(), c.syncs.Load(), c.syncNanos.Load(), c.puts.Load(), c.putBytes.Load(), c.putNanos.Load()}
		var d [6]int64
		for i := range cur {
			d[i] = cur[i] - prev[i]
		}
		prev = cur
		avg := func(nanos, n int64) time.Duration {
			if n == 0 {
				return 0
			}
			return time.Duration(nanos / n).Round(100 * time.Microsecond)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s := interval.Seconds()
		fmt.Fprintf(os.Stderr, "server child: %.0f events/s, %.0f syncs/s (avg wait %s), %.0f chunk puts/s (avg %s, %.1f MB/s), heap in use %d MiB, %d goroutines\n",
			float64(d[0])/s, float64(d[1])/s, avg(d[2], d[1]), float64(d[3])/s, avg(d[5], d[3]), float64(d[4])/1e6/s,
			ms.HeapInuse>>20, runtime.NumGoroutine())
	}
}
