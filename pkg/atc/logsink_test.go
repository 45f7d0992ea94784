package atc

import (
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/porter-ci/porter/internal/eventually"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/test/testenv"
)

// TestLogSinkJoinsItsWriter: FinishBuild returns only once the build's log
// writer (buildlog's Log.Run) has ended, so a sink leaves no goroutine
// behind (real MinIO).
func TestLogSinkJoinsItsWriter(t *testing.T) {
	store := testenv.MinIOStore(t)
	sink, err := NewLogSink(store, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.StartBuild(t.Context(), 42, "s1"); err != nil {
		t.Fatal(err)
	}
	eventually.Within(t, 5*time.Second, func() error {
		if !writerRunning() {
			return errors.New("no log writer runs for the started build")
		}
		return nil
	})
	if err := sink.FinishBuild(t.Context(), 42, concourse.StatusSucceeded); err != nil {
		t.Fatal(err)
	}
	// At once, not eventually: FinishBuild has returned.
	if writerRunning() {
		t.Error("the finished build's log writer still runs after FinishBuild returned")
	}
	if _, err := sink.LastSeq(t.Context(), "s1"); err == nil {
		t.Error("the finished build's step is still known")
	}
}

// writerRunning reports whether some goroutine runs a build log's writer.
func writerRunning() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "buildlog.(*Log).Run")
}
