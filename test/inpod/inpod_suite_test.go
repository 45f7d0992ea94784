// Package inpod_test runs a step's in-pod processes (`porter sidecar` and
// `porter entrypoint`) as real processes on this machine, against a real
// MinIO and a real gRPC server playing the ATC.
package inpod_test

import (
	"context"
	"os"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/test/stepproc"
	"github.com/porter-ci/porter/test/testenv"
)

func TestInPod(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "In-pod processes")
}

var _ = ReportAfterSuite("spec times", testenv.RecordSpecTimes)

var (
	porterBin string
	minio     *testenv.MinIO
	blobCfg   blobstore.Config
	store     blobstore.Store
)

var _ = BeforeSuite(func(ctx context.Context) {
	dir, err := os.MkdirTemp("", "porter-inpod-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)
	porterBin, err = stepproc.BuildPorter(ctx, dir)
	Expect(err).NotTo(HaveOccurred())

	minio, err = testenv.StartMinIO(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(minio.Terminate)
	bucket, err := minio.NewBucket(ctx)
	Expect(err).NotTo(HaveOccurred())
	blobCfg = minio.Config(bucket)
	store, err = blobstore.Open(ctx, blobCfg)
	Expect(err).NotTo(HaveOccurred())
})
