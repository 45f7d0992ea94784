package gc_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/gc"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

var _ = Describe("step pods", func() {
	It("deletes a finished step's pod after its retention, and fly containers no longer lists it", func(ctx SpecContext) {
		res := run(ctx, testenv.FlyCmd{Args: []string{"execute", "-c", taskFile("", "echo done")}})
		id := buildID(res.Output())
		// The container record outlives the build by the retention (1 s)
		// at most a GC interval (1 s) or so.
		Eventually(func() []corev1.Pod { return buildPods(ctx, id) }).WithTimeout(30 * time.Second).Should(BeEmpty())
		Eventually(func() []map[string]any { return flyContainers(ctx, id) }).WithTimeout(10 * time.Second).Should(BeEmpty())
	})

	It("deletes a pod with Porter's labels and no container record, and never a pod without them", func(ctx SpecContext) {
		orphan := sleeperPod("porter-orphan-"+suffix(), podspec.StepLabels("orphan-"+suffix(), "0", "main", workerName))
		// Labelled like Porter's, except managed-by: still not ours.
		almost := podspec.StepLabels("other-"+suffix(), "0", "main", workerName)
		delete(almost, podspec.LabelManagedBy)
		foreign := []*corev1.Pod{
			sleeperPod("not-porter-"+suffix(), map[string]string{"app": "someone-else"}),
			sleeperPod("almost-porter-"+suffix(), almost),
		}
		for _, p := range append([]*corev1.Pod{orphan}, foreign...) {
			_, err := env.Admin.CoreV1().Pods(ns.Name).Create(ctx, p, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(func(ctx context.Context) {
				grace := int64(0)
				err := env.Admin.CoreV1().Pods(ns.Name).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
				if !apierrors.IsNotFound(err) {
					Expect(err).NotTo(HaveOccurred())
				}
			})
		}
		Eventually(func() bool { return podExists(ctx, orphan.Name) }).WithTimeout(30*time.Second).Should(BeFalse(),
			"the orphan goes once older than --gc-orphan-grace (2 s)")
		// Several passes (1 s apart) later, the others are all still there.
		Consistently(func() []bool {
			var out []bool
			for _, p := range foreign {
				out = append(out, podExists(ctx, p.Name))
			}
			return out
		}).WithTimeout(6 * time.Second).WithPolling(time.Second).Should(HaveEach(BeTrue()))
		Expect(server.Log()).To(MatchRegexp(`gc pass.*orphan_pods"?[=:]1`))
	})
})

var _ = Describe("staging objects", func() {
	It("deletes a staging object older than an hour and keeps a fresh one", func(ctx SpecContext) {
		// Left by the staging uploads of earlier versions.
		oldKey, freshKey := "staging/old-"+suffix()+".tar.zst", "staging/fresh-"+suffix()+".tar.zst"
		old, err := store.Put(ctx, oldKey, strings.NewReader("leftover of an interrupted upload"), -1, blobstore.PutOptions{})
		Expect(err).NotTo(HaveOccurred())
		time.Sleep(2100 * time.Millisecond) // S3 times have 1 s resolution
		_, err = store.Put(ctx, freshKey, strings.NewReader("an upload in progress"), -1, blobstore.PutOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) { _ = store.Delete(ctx, freshKey) })
		fresh, err := store.Stat(ctx, freshKey)
		Expect(err).NotTo(HaveOccurred())
		old, err = store.Stat(ctx, oldKey)
		Expect(err).NotTo(HaveOccurred())
		Expect(fresh.LastModified.Sub(old.LastModified)).To(BeNumerically(">=", time.Second))

		// The server's loop (1 h threshold) keeps both: they are young.
		Consistently(func() bool { return blobExists(ctx, oldKey) && blobExists(ctx, freshKey) }).
			WithTimeout(3 * time.Second).WithPolling(500 * time.Millisecond).Should(BeTrue())

		// A collector whose clock reads an hour and a second after the old
		// object was written, on the same bucket and database: the old one
		// is past the hour, the fresh one is not.
		d, err := db.Open(ctx, dsn, slog.New(slog.NewTextHandler(GinkgoWriter, nil)))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(d.Close)
		c := gc.New(gc.Config{ArtifactRetention: 1000 * time.Hour}, d, store, nil, slog.New(slog.NewTextHandler(GinkgoWriter, nil)))
		c.Now = func() time.Time { return old.LastModified.Add(time.Hour + time.Second) }
		res, err := c.Collect(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.StagingObjects).To(Equal(1))
		Expect(res.StagingBytes).To(Equal(old.Size))
		Expect(res.ArtifactBlobs).To(BeZero())
		Expect(blobExists(ctx, oldKey)).To(BeFalse())
		Expect(blobExists(ctx, freshKey)).To(BeTrue())
	})
})

var _ = Describe("artifacts", func() {
	It("never deletes an artifact a running build uses, and deletes it once only a finished build past retention references it", func(ctx SpecContext) {
		in := GinkgoT().TempDir()
		content := "input " + rand.Text()
		Expect(os.WriteFile(filepath.Join(in, "file"), []byte(content), 0o644)).To(Succeed())
		out := GinkgoT().TempDir()
		// The task sleeps through several retentions' worth of GC passes
		// (1 s apart) before it reads its input.
		task := taskFile("inputs: [{name: in}]\noutputs: [{name: out}]\n",
			"echo started; sleep 15; (cat in/file && echo output) > out/file && echo read")
		before := flyVolumePaths(ctx)
		p, err := fly.Start(testenv.FlyCmd{Args: []string{"execute", "-c", task, "-i", "in=" + in, "-o", "out=" + out}})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.Kill)

		// The uploaded input is a volume while the build runs.
		var inKey string
		Eventually(func() []string { return newPaths(flyVolumePaths(ctx), before) }).WithTimeout(30 * time.Second).Should(HaveLen(1))
		inKey = newPaths(flyVolumePaths(ctx), before)[0]
		Eventually(p.Stdout.String).WithTimeout(90 * time.Second).Should(ContainSubstring("started"))
		// Past the retention, with GC passing every second, the running
		// build's input stays: the record and the blob.
		Consistently(func() bool {
			return slices.Contains(flyVolumePaths(ctx), inKey) && blobExists(ctx, inKey)
		}).WithTimeout(10 * time.Second).WithPolling(time.Second).Should(BeTrue())

		res, err := p.Wait(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.ExitCode).To(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("read"))
		got, err := os.ReadFile(filepath.Join(out, "file"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(got)).To(Equal(content+"output\n"), "the task read its input after the GC passes")

		// The input and the kept output, referenced only by a finished
		// build, go once it ended artifactRetention ago: records and blobs.
		added := newPaths(flyVolumePaths(ctx), before)
		Expect(added).To(ContainElement(inKey))
		Expect(len(added)).To(BeNumerically(">=", 2), "the upload and the build's output: %v", added)
		Eventually(func() []string { return newPaths(flyVolumePaths(ctx), before) }).WithTimeout(30 * time.Second).Should(BeEmpty())
		for _, key := range added {
			Eventually(func() bool { return blobExists(ctx, key) }).WithTimeout(10*time.Second).Should(BeFalse(), key)
		}
		// Their content addresses go with them: no manifest names a
		// collected blob.
		Eventually(func() []string {
			var dangling []string
			objs, err := store.List(ctx, "artifacts/")
			Expect(err).NotTo(HaveOccurred())
			for _, o := range objs {
				if m, err := blobstore.ReadManifest(ctx, store, o.Key); err == nil && slices.Contains(added, m.Key) {
					dangling = append(dangling, o.Key)
				}
			}
			return dangling
		}).WithTimeout(10 * time.Second).Should(BeEmpty())
	})
})

func newPaths(now, before []string) []string {
	var out []string
	for _, p := range now {
		if !slices.Contains(before, p) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func suffix() string { return strings.ToLower(rand.Text()[:8]) }

func sleeperPod(name string, labels map[string]string) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{Name: "sleep", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sleep", "3600"}}},
		},
	}
}

func podExists(ctx context.Context, name string) bool {
	GinkgoHelper()
	_, err := env.Admin.CoreV1().Pods(ns.Name).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	Expect(err).NotTo(HaveOccurred())
	return true
}

var _ = Describe("build logs", func() {
	It("deletes a destroyed pipeline's build log objects and keeps another build's", func(ctx SpecContext) {
		d, err := db.Open(ctx, dsn, slog.New(slog.DiscardHandler))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(d.Close)
		logKeys := func(id int) []string {
			chunks, err := d.EventChunks(ctx, int64(id))
			Expect(err).NotTo(HaveOccurred())
			var keys []string
			for _, c := range chunks {
				keys = append(keys, c.Key)
			}
			return keys
		}

		kept := run(ctx, testenv.FlyCmd{Args: []string{"execute", "-c", taskFile("", "echo kept-log-line")}})
		keptID := buildID(kept.Stdout)

		pipeline := "logs-" + suffix()
		cfg := filepath.Join(GinkgoT().TempDir(), "pipeline.yml")
		Expect(os.WriteFile(cfg, []byte(`jobs:
- name: log
  plan:
  - task: t
    config:
      platform: linux
      image_resource: {type: registry-image, source: {repository: busybox}}
      run: {path: echo, args: [pipeline-log-line]}
`), 0o644)).To(Succeed())
		run(ctx, testenv.FlyCmd{Args: []string{"set-pipeline", "-n", "-p", pipeline, "-c", cfg}})
		run(ctx, testenv.FlyCmd{Args: []string{"unpause-pipeline", "-p", pipeline}})
		res := run(ctx, testenv.FlyCmd{Args: []string{"trigger-job", "-j", pipeline + "/log", "-w"}})
		Expect(res.Stdout).To(ContainSubstring("pipeline-log-line"))
		builds := run(ctx, testenv.FlyCmd{Args: []string{"builds", "-j", pipeline + "/log", "--json"}})
		var list []struct{ ID int }
		Expect(json.Unmarshal([]byte(builds.Stdout), &list)).To(Succeed())
		Expect(list).To(HaveLen(1))

		// The pipeline's build log objects, less any it shares with the kept build.
		var keptKeys, gone []string
		Eventually(func() []string {
			keptKeys, gone = logKeys(keptID), nil
			for _, k := range logKeys(list[0].ID) {
				if !slices.Contains(keptKeys, k) {
					gone = append(gone, k)
				}
			}
			return gone
		}).WithTimeout(30 * time.Second).ShouldNot(BeEmpty())
		Expect(keptKeys).NotTo(BeEmpty())
		for _, k := range gone {
			Expect(blobExists(ctx, k)).To(BeTrue(), k)
		}

		run(ctx, testenv.FlyCmd{Args: []string{"destroy-pipeline", "-n", "-p", pipeline}})
		Eventually(func() []string {
			var left []string
			for _, k := range gone {
				if blobExists(ctx, k) {
					left = append(left, k)
				}
			}
			return left
		}).WithTimeout(30*time.Second).Should(BeEmpty(), "the destroyed pipeline's build log objects are still stored")
		for _, k := range keptKeys {
			Expect(blobExists(ctx, k)).To(BeTrue(), "the kept build's log object %s went", k)
		}
		watch := run(ctx, testenv.FlyCmd{Args: []string{"watch", "-b", strconv.Itoa(keptID)}})
		Expect(watch.Stdout).To(ContainSubstring("kept-log-line"))
	})
})
