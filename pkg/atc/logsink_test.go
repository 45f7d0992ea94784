package atc

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
)

// memStore keeps the sink's chunks in memory.
type memStore struct {
	blobstore.Store // the methods a log does not use
	mu              sync.Mutex
	objs            map[string][]byte
}

func (m *memStore) Put(_ context.Context, key string, body io.Reader, _ int64, _ blobstore.PutOptions) (blobstore.ObjectInfo, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return blobstore.ObjectInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[key] = data
	return blobstore.ObjectInfo{Key: key, Size: int64(len(data))}, nil
}

func (m *memStore) Get(_ context.Context, key string) (io.ReadCloser, blobstore.ObjectInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.objs[key]
	if !ok {
		return nil, blobstore.ObjectInfo{}, blobstore.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(data)), blobstore.ObjectInfo{Key: key, Size: int64(len(data))}, nil
}

// logWriters counts the goroutines in a build log's writer, looked at
// once: an owner that joined its writers leaves none, with no waiting.
func logWriters() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "buildlog.(*Log).Run(")
}

// The sink owns its builds' log writers: FinishBuild and Close return only
// once the writer has ended, though the context they were started with is
// still live.
func TestLogSinkJoinsItsLogWriters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name string
		end  func(*LogSink) error
	}{
		{"FinishBuild", func(k *LogSink) error { return k.FinishBuild(ctx, 1, concourse.StatusSucceeded) }},
		{"Close", func(k *LogSink) error { k.Close(); return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := logWriters(); n != 0 {
				t.Fatalf("%d log writers before the test", n)
			}
			k, err := NewLogSink(&memStore{objs: map[string][]byte{}}, 0, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if err := k.StartBuild(ctx, 1, "step-1"); err != nil {
				t.Fatal(err)
			}
			if err := tc.end(k); err != nil {
				t.Fatal(err)
			}
			if n := logWriters(); n != 0 {
				t.Fatalf("%d log writers still running after %s returned", n, tc.name)
			}
		})
	}
}
