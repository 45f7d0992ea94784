package blobstore_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/test/testenv"
)

func TestBlobstore(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Blobstore Suite")
}

// minioServer is the one MinIO of the suite, started in BeforeSuite.
var minioServer *testenv.MinIO

var _ = BeforeSuite(func(ctx SpecContext) {
	m, err := testenv.StartMinIO(ctx)
	Expect(err).NotTo(HaveOccurred(), "start MinIO (is docker up? hack/docker.sh up)")
	minioServer = m
	// Registered right away so the container goes even if a spec fails;
	// Ryuk is off, nothing else would remove it.
	DeferCleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		Expect(m.Terminate(ctx)).To(Succeed())
	})
}, NodeTimeout(5*time.Minute))
