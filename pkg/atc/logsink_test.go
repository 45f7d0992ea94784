package atc

import (
	"log/slog"
	"testing"

	"go.uber.org/goleak"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/test/testenv"
)

// TestLogSinkJoinsItsWriter: FinishBuild returns once the build's log
// writer has ended, so a sink leaves no goroutine behind (real MinIO).
func TestLogSinkJoinsItsWriter(t *testing.T) {
	store := testenv.MinIOStore(t)
	// The blobstore client's idle keep-alive connections are http's.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"))
	sink, err := NewLogSink(store, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.StartBuild(t.Context(), 42, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := sink.FinishBuild(t.Context(), 42, concourse.StatusSucceeded); err != nil {
		t.Fatal(err)
	}
	if _, err := sink.LastSeq(t.Context(), "s1"); err == nil {
		t.Error("the finished build's step is still known")
	}
}
