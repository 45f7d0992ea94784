package blobstore_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/pkg/blobstore"
)

var _ = Describe("ConfigFromEnv", func() {
	setAll := func(kv map[string]string) {
		for _, k := range []string{blobstore.EnvDriver, blobstore.EnvEndpoint, blobstore.EnvBucket, blobstore.EnvRegion,
			blobstore.EnvAccessKey, blobstore.EnvSecretKey, blobstore.EnvSecure, blobstore.EnvCAFile} {
			GinkgoT().Setenv(k, kv[k])
		}
	}

	It("reads every variable", func() {
		setAll(map[string]string{
			blobstore.EnvDriver: "s3", blobstore.EnvEndpoint: "minio.example:9000", blobstore.EnvBucket: "porter",
			blobstore.EnvRegion: "eu-west-1", blobstore.EnvAccessKey: "ak", blobstore.EnvSecretKey: "sk",
			blobstore.EnvSecure: "true", blobstore.EnvCAFile: "/etc/ca.pem",
		})
		cfg, err := blobstore.ConfigFromEnv()
		Expect(err).NotTo(HaveOccurred())
		Expect(cfg).To(Equal(blobstore.Config{
			Driver: "s3", Endpoint: "minio.example:9000", Bucket: "porter", Region: "eu-west-1",
			AccessKey: "ak", SecretKey: "sk", Secure: true, CAFile: "/etc/ca.pem",
		}))
	})

	It("defaults the driver to minio", func() {
		setAll(map[string]string{blobstore.EnvEndpoint: "h:1", blobstore.EnvBucket: "b", blobstore.EnvAccessKey: "a", blobstore.EnvSecretKey: "s"})
		cfg, err := blobstore.ConfigFromEnv()
		Expect(err).NotTo(HaveOccurred())
		Expect(cfg.Driver).To(Equal("minio"))
		Expect(cfg.Secure).To(BeFalse())
	})

	It("names every missing variable", func() {
		setAll(map[string]string{blobstore.EnvBucket: "b"})
		_, err := blobstore.ConfigFromEnv()
		Expect(err).To(HaveOccurred())
		for _, name := range []string{"PORTER_BLOBSTORE_ENDPOINT", "PORTER_BLOBSTORE_ACCESS_KEY", "PORTER_BLOBSTORE_SECRET_KEY"} {
			Expect(err.Error()).To(ContainSubstring(name + " is not set"))
		}
		Expect(err.Error()).NotTo(ContainSubstring("PORTER_BLOBSTORE_BUCKET"))
	})

	It("refuses a bad SECURE, driver or endpoint", func() {
		base := map[string]string{blobstore.EnvEndpoint: "h:1", blobstore.EnvBucket: "b", blobstore.EnvAccessKey: "a", blobstore.EnvSecretKey: "s"}
		for k, v := range map[string]string{blobstore.EnvSecure: "maybe", blobstore.EnvDriver: "gcs", blobstore.EnvEndpoint: "http://h:1"} {
			kv := map[string]string{}
			for bk, bv := range base {
				kv[bk] = bv
			}
			kv[k] = v
			setAll(kv)
			_, err := blobstore.ConfigFromEnv()
			Expect(err).To(HaveOccurred(), "%s=%s", k, v)
		}
	})

	It("opens neither driver with an invalid config", func() {
		_, err := blobstore.Open(context.Background(), blobstore.Config{Driver: "minio", Endpoint: "h:1"})
		Expect(err).To(MatchError(ContainSubstring("bucket is empty")))
	})
})
