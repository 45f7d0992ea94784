package atc

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/test/testenv"
)

// logWriters counts the goroutines in a build log's writer, looked at
// once: an owner that joined its writers leaves none, with no waiting.
func logWriters() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "buildlog.(*Log).Run(")
}

// The sink owns its builds' log writers (its logs in a real MinIO): FinishBuild and Close return only
// once the writer has ended, though the context they were started with is
// still live.
func TestLogSinkJoinsItsLogWriters(t *testing.T) {
	store := testenv.MinIOStore(t)
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
			k, err := NewLogSink(store, 0, slog.New(slog.DiscardHandler))
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
