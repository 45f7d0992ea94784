package exec

import (
	"testing"

	"github.com/porter-ci/porter/pkg/atc/buildlog"
	"github.com/porter-ci/porter/pkg/atc/buildlog/buildlogtest"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/test/testenv"
)

// minioStore is a fresh bucket of a real MinIO (Docker).
func minioStore(t *testing.T) blobstore.Store { return testenv.MinIOStore(t) }

func testLogs(t *testing.T, store blobstore.Store) *buildlog.Logs { return buildlogtest.Logs(t, store) }

func durableRecords(t *testing.T, l *buildlog.Log) []buildlog.Record {
	return buildlogtest.DurableRecords(t, l)
}
