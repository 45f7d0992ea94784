package runtime_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/auditseal"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

// What step code can do to the blobstore: with its pod's own credentials
// (read here from its Secret, as a step that found them would), and as root
// in its container against its own audit record.
var _ = Describe("step storage isolation", func() {
	minioCfg := func(bucket, access, secret, token string) blobstore.Config {
		return blobstore.Config{Driver: blobstore.DriverMinio, Endpoint: cluster["PORTER_CLUSTER_MINIO_ENDPOINT"],
			Bucket: bucket, Region: cluster["PORTER_CLUSTER_MINIO_REGION"], AccessKey: access, SecretKey: secret, SessionToken: token}
	}
	adminStore := func(ctx context.Context, bucket string) blobstore.Store {
		s, err := blobstore.Open(ctx, minioCfg(bucket, cluster["PORTER_CLUSTER_MINIO_ACCESS_KEY"], cluster["PORTER_CLUSTER_MINIO_SECRET_KEY"], ""))
		Expect(err).NotTo(HaveOccurred())
		return s
	}
	// outputKey is the blob of build id's one output (a volume's path).
	outputKey := func(ctx context.Context, id int64) string {
		GinkgoHelper()
		arts, err := api().BuildArtifacts(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(arts).To(HaveLen(1))
		var vols []concourse.Volume
		getJSON(ctx, "/api/v1/teams/main/volumes", &vols)
		for _, v := range vols {
			if v.ID == strconv.FormatInt(arts[0].ID, 10) {
				return v.Path
			}
		}
		Fail("no volume for artifact " + mustJSON(arts))
		return ""
	}

	It("gives a step credentials that cannot read or overwrite another build's objects", func(ctx SpecContext) {
		run := func(content string) (int64, string) {
			out := GinkgoT().TempDir()
			res := porter(ctx, "execute", "-o", "files="+out, "-c", taskFile(busyboxTask+`outputs: [{name: files}]
run: {path: sh, args: ["-c", "echo `+content+` > files/f"]}
`))
			Expect(res.Code).To(Equal(0), res.String())
			id := buildID(res.Stdout)
			return id, stepID(ctx, id)
		}
		victimBuild, _ := run("victim-" + strings.ToLower(rand.Text()))
		victimKey := outputKey(ctx, victimBuild)
		victimSid := stepID(ctx, victimBuild)
		_, attackerSid := run("attacker-" + strings.ToLower(rand.Text()))

		// The attacker's Secret: the step's credentials, not the server's.
		sec, err := admin.CoreV1().Secrets(namespace).Get(ctx, podspec.Name(attackerSid), metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "the step's Secret lives as long as its pod")
		access, secret, token := string(sec.Data[podspec.SecretKeyBlobstoreAccessKey]), string(sec.Data[podspec.SecretKeyBlobstoreSecretKey]), string(sec.Data[podspec.SecretKeyBlobstoreToken])
		Expect(token).NotTo(BeEmpty(), "temporary credentials")
		Expect(access).NotTo(Equal(cluster["PORTER_CLUSTER_MINIO_ACCESS_KEY"]), "the server's key entered a pod")
		for _, v := range sec.Data {
			Expect(string(v)).NotTo(ContainSubstring(cluster["PORTER_CLUSTER_MINIO_SECRET_KEY"]))
		}
		bucket := server.Config.Bucket
		step, err := blobstore.Open(ctx, minioCfg(bucket, access, secret, token))
		Expect(err).NotTo(HaveOccurred())
		stepAudit, err := blobstore.Open(ctx, minioCfg(bucket+"-audit", access, secret, token))
		Expect(err).NotTo(HaveOccurred())

		// They work for what the step owns...
		_, err = step.Put(ctx, blobstore.NewBlobKey("main", attackerSid), strings.NewReader("x"), 1, blobstore.PutOptions{})
		Expect(err).NotTo(HaveOccurred(), "writing under its own prefix")
		// ...and for nothing of the other build's.
		victimPrefix, err := testenv.AuditPrefix(ctx, adminStore(ctx, bucket+"-audit"), victimBuild)
		Expect(err).NotTo(HaveOccurred())
		victimRecord := victimPrefix + "steps/" + victimSid + "/" + blobstore.ResultObject
		_, _, err = step.Get(ctx, victimKey)
		Expect(err).To(MatchError(ContainSubstring("Access Denied")), "reading the other build's output")
		_, err = step.Put(ctx, victimKey, strings.NewReader("poisoned"), 8, blobstore.PutOptions{})
		Expect(err).To(MatchError(ContainSubstring("Access Denied")), "overwriting the other build's output")
		Expect(step.Delete(ctx, victimKey)).To(MatchError(ContainSubstring("Access Denied")), "deleting the other build's output")
		_, _, err = stepAudit.Get(ctx, victimRecord)
		Expect(err).To(MatchError(ContainSubstring("Access Denied")), "reading the other build's audit record")
		_, err = stepAudit.Put(ctx, victimRecord, strings.NewReader("{}"), 2, blobstore.PutOptions{})
		Expect(err).To(MatchError(ContainSubstring("Access Denied")), "overwriting the other build's audit record")
		_, err = step.List(ctx, "blobs/")
		Expect(err).To(HaveOccurred(), "listing the bucket")
		_, err = step.Put(ctx, blobstore.ManifestKey("main", "sha256:"+strings.Repeat("a", 64)), strings.NewReader("{}"), 2, blobstore.PutOptions{})
		Expect(err).To(MatchError(ContainSubstring("Access Denied")), "claiming a content address")

		// The victim's output is intact.
		dir := GinkgoT().TempDir()
		_, err = blobstore.DownloadDir(ctx, adminStore(ctx, bucket), victimKey, "", dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.ReadFile(filepath.Join(dir, "f"))).To(HavePrefix("victim-"))
	})

	It("keeps a step's audit record from being rewritten or added to with the step's own credentials", func(ctx SpecContext) {
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+`run: {path: echo, args: [the-real-output]}
`))
		Expect(res.Code).To(Equal(0), res.String())
		id := buildID(res.Stdout)
		sid := stepID(ctx, id)

		// The step's credentials, from its Secret, as one who read it has them.
		sec, err := admin.CoreV1().Secrets(namespace).Get(ctx, podspec.Name(sid), metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "the step's Secret lives as long as its pod")
		access, secret, token := string(sec.Data[podspec.SecretKeyBlobstoreAccessKey]), string(sec.Data[podspec.SecretKeyBlobstoreSecretKey]), string(sec.Data[podspec.SecretKeyBlobstoreToken])
		Expect(token).NotTo(BeEmpty(), "temporary credentials")
		bucket := server.Config.Bucket
		step, err := blobstore.Open(ctx, minioCfg(bucket, access, secret, token))
		Expect(err).NotTo(HaveOccurred())
		stepAudit, err := blobstore.Open(ctx, minioCfg(bucket+"-audit", access, secret, token))
		Expect(err).NotTo(HaveOccurred())

		audit := adminStore(ctx, bucket+"-audit")
		prefix, err := testenv.AuditPrefix(ctx, audit, id)
		Expect(err).NotTo(HaveOccurred())
		stepPrefix := prefix + "steps/" + sid + "/"
		readPlain := func(key string) string {
			GinkgoHelper()
			rc, _, err := audit.Get(ctx, key) // the newest version, as any S3 client reads
			Expect(err).NotTo(HaveOccurred())
			defer rc.Close()
			b, err := io.ReadAll(rc)
			Expect(err).NotTo(HaveOccurred())
			return string(b)
		}
		record := readPlain(stepPrefix + blobstore.ResultObject)
		Expect(record).To(ContainSubstring(`"result": "SUCCEEDED"`))

		// The attack of issue 28: overwrite result.json, add forged.json.
		forgery := `{"step_id": "` + sid + `", "result": "FAILED"}`
		for _, key := range []string{stepPrefix + blobstore.ResultObject, stepPrefix + "forged.json"} {
			_, err = stepAudit.Put(ctx, key, strings.NewReader(forgery), int64(len(forgery)), blobstore.PutOptions{})
			Expect(err).To(MatchError(ContainSubstring("Access Denied")), "writing %s in the audit bucket", key)
			_, err = step.Put(ctx, key, strings.NewReader(forgery), int64(len(forgery)), blobstore.PutOptions{})
			Expect(err).To(MatchError(ContainSubstring("Access Denied")), "writing %s in the artifacts' bucket", key)
		}
		Expect(stepAudit.Delete(ctx, stepPrefix+blobstore.ResultObject)).To(MatchError(ContainSubstring("Access Denied")))
		// What the step may still write, its staging, the server sealed
		// already: a forgery staged now stays there.
		auditID := strings.TrimSuffix(strings.TrimPrefix(prefix, "builds/"), "/")
		_, err = step.Put(ctx, auditseal.StagedKey(auditID, sid, blobstore.ResultObject), strings.NewReader(forgery), int64(len(forgery)), blobstore.PutOptions{})
		Expect(err).NotTo(HaveOccurred(), "the step's own staging")

		// A plain read and the API agree, on the record the server sealed.
		Expect(readPlain(stepPrefix + blobstore.ResultObject)).To(Equal(record))
		objs, err := audit.List(ctx, stepPrefix)
		Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, o := range objs {
			names = append(names, strings.TrimPrefix(o.Key, stepPrefix))
		}
		// The server writes the step's timeline too, once the pod's status
		// shows it: it may come after this listing.
		names = slices.DeleteFunc(names, func(n string) bool { return n == blobstore.TimelineObject })
		Expect(names).To(ConsistOf(blobstore.ActionObject, blobstore.PodObject, blobstore.EventsObject, blobstore.ResultObject))
		shown, err := api().Audit(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(shown.Steps[sid])).To(MatchJSON(record))
	})

	It("keeps a step's audit record out of reach of the step, even as root", func(ctx SpecContext) {
		// The step looks for the journal everywhere it can see and rewrites
		// whatever it finds, and tries the sidecar's environment.
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args:
  - -c
  - |
    echo the-real-output
    n=0
    for f in $(find / \( -path /proc -o -path /sys \) -prune -o -name 'events-*' -print 2>/dev/null); do echo forged > "$f"; n=$((n+1)); done
    echo "journals found: $n"
    cat /proc/*/environ 2>/dev/null | tr '\0' '\n' | grep -c PORTER_BLOBSTORE_SECRET_KEY || true
`))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("journals found: 0"), "the step saw its journal")
		Expect(taskOutput(res.Stdout)).To(HaveSuffix("0\n"), "the step read the sidecar's credentials")
		id := buildID(res.Stdout)
		sid := stepID(ctx, id)

		audit := adminStore(ctx, server.Config.Bucket+"-audit")
		prefix, err := testenv.AuditPrefix(ctx, audit, id)
		Expect(err).NotTo(HaveOccurred())
		rc, _, err := blobstore.GetOriginal(ctx, audit, prefix+"steps/"+sid+"/"+blobstore.EventsObject)
		Expect(err).NotTo(HaveOccurred())
		defer rc.Close()
		dec, err := zstd.NewReader(rc)
		Expect(err).NotTo(HaveOccurred())
		defer dec.Close()
		journal, err := io.ReadAll(dec)
		Expect(err).NotTo(HaveOccurred())
		// Lines of protojson events; output data is base64.
		var output strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(string(journal)), "\n") {
			var ev struct {
				Output *struct {
					Data []byte `json:"data"`
				} `json:"output"`
			}
			Expect(json.Unmarshal([]byte(line), &ev)).To(Succeed(), "journal line %q", line)
			if ev.Output != nil {
				output.Write(ev.Output.Data)
			}
		}
		Expect(output.String()).To(HavePrefix("the-real-output\njournals found: 0\n"))
	})
})
