package redteam_test

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

var executingBuild = regexp.MustCompile(`executing build (\d+)`)

var _ = Describe("the audit trail", func() {
	// The attack (issue 28, 4): with a step's own S3 credentials (its
	// sidecar's), result.json was overwritten and forged.json added under
	// the step's audit prefix: the API showed the original, a plain S3
	// read the forgery. Now the step's credentials are denied the audit
	// bucket; the server seals what the step staged, once.
	It("keeps a step's record from being rewritten or added to with the step's own credentials", func(ctx SpecContext) {
		task := writeFile("platform: linux\nimage_resource: {type: registry-image, source: {repository: busybox}}\nrun: {path: echo, args: [the-real-output]}\n")
		res := run(ctx, member, "execute", "-c", task)
		m := executingBuild.FindStringSubmatch(res.Stdout)
		Expect(m).NotTo(BeNil(), res.String())
		build := m[1]

		pods, err := env.Admin.CoreV1().Pods(workerNS).List(ctx, metav1.ListOptions{LabelSelector: podspec.LabelBuild + "=" + build})
		Expect(err).NotTo(HaveOccurred())
		Expect(pods.Items).To(HaveLen(1))
		sid := pods.Items[0].Labels[podspec.LabelStep]
		sec, err := env.Admin.CoreV1().Secrets(workerNS).Get(ctx, podspec.Name(sid), metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		cfg := func(bucket, access, secret, token string) blobstore.Config {
			return blobstore.Config{Driver: blobstore.DriverMinio, Endpoint: env.Cluster["PORTER_CLUSTER_MINIO_ENDPOINT"],
				Bucket: bucket, Region: env.Cluster["PORTER_CLUSTER_MINIO_REGION"], AccessKey: access, SecretKey: secret, SessionToken: token}
		}
		stepCreds := func(bucket string) blobstore.Store {
			GinkgoHelper()
			s, err := blobstore.Open(ctx, cfg(bucket, string(sec.Data[podspec.SecretKeyBlobstoreAccessKey]),
				string(sec.Data[podspec.SecretKeyBlobstoreSecretKey]), string(sec.Data[podspec.SecretKeyBlobstoreToken])))
			Expect(err).NotTo(HaveOccurred())
			return s
		}
		auditBucket := server.Config.Bucket + "-audit"
		admin, err := blobstore.Open(ctx, cfg(auditBucket, env.Cluster["PORTER_CLUSTER_MINIO_ACCESS_KEY"], env.Cluster["PORTER_CLUSTER_MINIO_SECRET_KEY"], ""))
		Expect(err).NotTo(HaveOccurred())
		var id int64
		_, err = fmt.Sscan(build, &id)
		Expect(err).NotTo(HaveOccurred())
		prefix, err := testenv.AuditPrefix(ctx, admin, id)
		Expect(err).NotTo(HaveOccurred())
		stepPrefix := prefix + "steps/" + sid + "/"
		plain := func(key string) string {
			GinkgoHelper()
			rc, _, err := admin.Get(ctx, key) // the newest version, as any S3 client reads
			Expect(err).NotTo(HaveOccurred())
			defer rc.Close()
			b, err := io.ReadAll(rc)
			Expect(err).NotTo(HaveOccurred())
			return string(b)
		}
		record := plain(stepPrefix + blobstore.ResultObject)
		forgery := `{"step_id": "` + sid + `", "result": "FAILED"}`
		for _, bucket := range []string{auditBucket, server.Config.Bucket} {
			for _, key := range []string{stepPrefix + blobstore.ResultObject, stepPrefix + "forged.json"} {
				_, err := stepCreds(bucket).Put(ctx, key, strings.NewReader(forgery), int64(len(forgery)), blobstore.PutOptions{})
				Expect(err).To(MatchError(ContainSubstring("Access Denied")), "writing %s in bucket %s", key, bucket)
			}
		}
		Expect(plain(stepPrefix + blobstore.ResultObject)).To(Equal(record))
		objs, err := admin.List(ctx, stepPrefix)
		Expect(err).NotTo(HaveOccurred())
		for _, o := range objs {
			Expect(o.Key).NotTo(HaveSuffix("forged.json"))
		}
	})
})
