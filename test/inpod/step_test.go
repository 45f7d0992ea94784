package inpod_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/test/testenv"
)

var _ = Describe("a step run by porter sidecar and porter entrypoint", func() {
	var atc *testATC
	BeforeEach(func() { atc = startATC() })

	It("runs echo hello world, streams the line and writes the audit record", func(ctx SpecContext) {
		a := newAction("hello", "sh", "-c", `echo "hello world"; echo "env=$STEP_ENV param=$GREETING" >&2`)
		a.Params = map[string]string{"GREETING": "hi"}
		r := runStep(atc, a, stepOptions{blob: blobCfg})

		evs, fin := atc.waitFinished(a.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_SUCCEEDED), describe(evs))
		Expect(stdoutOf(evs)).To(Equal("hello world\n"))
		Expect(exitedOf(evs).GetExitStatus()).To(BeZero())
		Expect(r.wait(30 * time.Second)).To(Equal(0))
		// The container's own log sees the output too.
		Expect(r.entryStdout.String()).To(ContainSubstring("hello world\n"))
		Expect(r.entryStderr.String()).To(ContainSubstring("env=from-container"))

		// Sequence numbers are 1..n without gaps.
		for i, e := range evs {
			Expect(e.GetSeq()).To(Equal(uint64(i + 1)))
		}

		rec := stepRecord(ctx, store, a)
		Expect(rec).To(HaveKeyWithValue("result", "SUCCEEDED"))
		Expect(rec).To(HaveKeyWithValue("step_id", a.StepID))
		Expect(fin.GetAuditKey()).To(Equal(blobstore.StepPrefix(a.Build.ID, a.StepID) + blobstore.ResultObject))
		journal := readZstdObject(ctx, rec["events_key"].(string))
		Expect(journal).To(ContainSubstring(`"seq":"1"`))
		Expect(journal).To(ContainSubstring(`"process_exited"`))
		_, err := store.Stat(ctx, blobstore.StepPrefix(a.Build.ID, a.StepID)+blobstore.ActionObject)
		Expect(err).NotTo(HaveOccurred())
	})

	It("passes an output of one step to the next as an input", func(ctx SpecContext) {
		make := newAction("make-a-file", "sh", "-c", `mkdir -p files/sub && echo "created by step one" > files/sub/created_file && ln -s sub/created_file files/link`)
		make.Outputs = []action.Output{{Name: "files", Path: "files"}}
		runStep(atc, make, stepOptions{blob: blobCfg}).wait(time.Minute)
		evs, fin := atc.waitFinished(make.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_SUCCEEDED), describe(evs))
		Expect(fin.GetOutputs()).To(HaveLen(1))
		out := fin.GetOutputs()[0]
		Expect(out.GetName()).To(Equal("files"))
		Expect(out.GetDigest()).To(MatchRegexp(`^blake3:[0-9a-f]{64}$`))
		Expect(out.GetKey()).To(HavePrefix(blobstore.BlobPrefix(make.Build.Team, make.StepID)), "the step writes under its own prefix")

		consume := newAction("consume-the-file", "sh", "-c", `cat files/sub/created_file; readlink files/link`)
		consume.Inputs = []action.Input{{Name: "files", Path: "files", Key: out.GetKey(), Digest: out.GetDigest()}}
		Expect(runStep(atc, consume, stepOptions{blob: blobCfg}).wait(time.Minute)).To(Equal(0))
		evs, fin = atc.waitFinished(consume.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_SUCCEEDED), describe(evs))
		Expect(stdoutOf(evs)).To(Equal("created by step one\nsub/created_file\n"))
	})

	It("passes an output that does not compress on as a plain tar, byte for byte", func(ctx SpecContext) {
		// 9 MiB: above the size under which artifacts are always compressed.
		noise := newAction("make-noise", "sh", "-c", `mkdir -p blob && cd blob && head -c 9437184 /dev/urandom > data && sha256sum data > data.sha256`)
		noise.Outputs = []action.Output{{Name: "blob", Path: "blob"}}
		runStep(atc, noise, stepOptions{blob: blobCfg}).wait(time.Minute)
		evs, fin := atc.waitFinished(noise.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_SUCCEEDED), describe(evs))
		out := fin.GetOutputs()[0]
		rc, _, err := store.Get(ctx, out.GetKey())
		Expect(err).NotTo(HaveOccurred())
		head := make([]byte, 4)
		_, err = io.ReadFull(rc, head)
		rc.Close()
		Expect(err).NotTo(HaveOccurred())
		Expect(head).NotTo(Equal([]byte{0x28, 0xb5, 0x2f, 0xfd}), "random bytes are stored as a plain tar, not zstd")

		check := newAction("check-noise", "sh", "-c", `cd blob && sha256sum -c data.sha256`)
		check.Inputs = []action.Input{{Name: "blob", Path: "blob", Key: out.GetKey(), Digest: out.GetDigest()}}
		Expect(runStep(atc, check, stepOptions{blob: blobCfg}).wait(time.Minute)).To(Equal(0))
		evs, fin = atc.waitFinished(check.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_SUCCEEDED), describe(evs))
		Expect(stdoutOf(evs)).To(Equal("data: OK\n"))
	})

	It("reports a non-zero exit status as a failure", func() {
		a := newAction("fails", "sh", "-c", `echo about to fail; exit 3`)
		r := runStep(atc, a, stepOptions{blob: blobCfg})
		evs, fin := atc.waitFinished(a.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_FAILED))
		Expect(fin.GetExitStatus()).To(Equal(int32(3)))
		Expect(exitedOf(evs).GetExitStatus()).To(Equal(int32(3)))
		Expect(r.wait(30 * time.Second)).To(Equal(3))
	})

	It("aborts a running process: TERM to its group, KILL after the grace period", func(ctx SpecContext) {
		a := newAction("abort", "sh", "-c", `trap '' TERM; sleep 300 & echo "child $!"; echo "started"; wait`)
		r := runStep(atc, a, stepOptions{blob: blobCfg})
		evs := atc.waitFor(a.StepID, time.Minute, func(e *eventspb.Event) bool { return strings.Contains(string(e.GetOutput().GetData()), "started") })
		child := childPID(stdoutOf(evs))
		Expect(alive(child)).To(BeTrue(), "the child runs before the abort")

		Expect(atc.server().Abort(a.StepID, "aborted by a test")).To(Succeed())
		evs, fin := atc.waitFinished(a.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_ABORTED))
		Expect(exitedOf(evs).GetAborted()).To(BeTrue())
		// The shell ignores TERM, so it took the KILL; its background child got TERM.
		Expect(exitedOf(evs).GetSignal()).To(Equal("killed"))
		Eventually(func() bool { return alive(child) }).Should(BeFalse(), "the whole process group is gone")
		Expect(r.wait(30 * time.Second)).To(Equal(128 + int(syscall.SIGKILL)))
	})

	It("reports an entrypoint killed under the process as errored and lost, for the ATC to ask the kubelet why", func() {
		a := newAction("lost", "sh", "-c", `echo started; sleep 300`)
		r := runStep(atc, a, stepOptions{blob: blobCfg})
		atc.waitFor(a.StepID, time.Minute, func(e *eventspb.Event) bool { return strings.Contains(string(e.GetOutput().GetData()), "started") })
		// What an eviction or an OOM kill of the whole container does.
		Expect(syscall.Kill(-r.Entrypoint.Process.Pid, syscall.SIGKILL)).To(Succeed())
		_, fin := atc.waitFinished(a.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_ERRORED))
		Expect(fin.GetEntrypointLost()).To(BeTrue())
		Expect(fin.GetError()).To(ContainSubstring("entrypoint went away"))
	})

	It("enforces the step timeout itself", func() {
		a := newAction("timeout", "sh", "-c", `echo started; sleep 300`)
		a.Timeout = action.Duration{Duration: 2 * time.Second}
		r := runStep(atc, a, stepOptions{blob: blobCfg})
		evs, fin := atc.waitFinished(a.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_FAILED))
		Expect(fin.GetError()).To(ContainSubstring("timeout 2s exceeded"))
		Expect(exitedOf(evs).GetTimedOut()).To(BeTrue())
		Expect(stdoutOf(evs)).To(Equal("started\n"))
		Expect(r.wait(30 * time.Second)).NotTo(Equal(0))
	})

	It("loses no log line when the ATC is killed and restarted mid-step", func() {
		const lines = 400
		a := newAction("restart", "sh", "-c", fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo "line $i"; i=$((i+1)); case $i in *0) sleep 0.05;; esac; done`, lines))
		r := runStep(atc, a, stepOptions{blob: blobCfg})
		atc.waitFor(a.StepID, time.Minute, func(e *eventspb.Event) bool { return strings.Contains(string(e.GetOutput().GetData()), "line 60\n") })
		atc.kill()
		time.Sleep(1500 * time.Millisecond) // the step keeps writing while the ATC is away
		atc.restart()

		evs, fin := atc.waitFinished(a.StepID, 2*time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_SUCCEEDED), describe(evs))
		var want strings.Builder
		for i := 1; i <= lines; i++ {
			fmt.Fprintf(&want, "line %d\n", i)
		}
		Expect(stdoutOf(evs)).To(Equal(want.String()), "every line exactly once, in order")
		for i, e := range evs {
			Expect(e.GetSeq()).To(Equal(uint64(i + 1)))
		}
		Expect(r.sidecarLog.String()).To(ContainSubstring("reconnecting"), "the stream really was cut")
		Expect(r.wait(30 * time.Second)).To(Equal(0))
	})

	It("retries uploads while MinIO is unreachable for a few seconds and still succeeds", func(ctx SpecContext) {
		proxy, err := testenv.StartProxy(blobCfg.Endpoint)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(proxy.Close)
		viaProxy := blobCfg
		viaProxy.Endpoint = proxy.Addr

		a := newAction("upload-retry", "sh", "-c", `mkdir -p out && head -c 67108864 /dev/urandom > out/blob && sha256sum out/blob | cut -d' ' -f1 > out/blob.sha256`)
		a.Outputs = []action.Output{{Name: "out", Path: "out"}}
		r := runStep(atc, a, stepOptions{blob: viaProxy})
		// MinIO goes away while the process runs, so the upload starts into the outage.
		atc.waitFor(a.StepID, time.Minute, func(e *eventspb.Event) bool {
			return e.GetStatus().GetStatus() == eventspb.StepStatus_STEP_STATUS_RUNNING
		})
		proxy.Down()
		atc.waitFor(a.StepID, time.Minute, func(e *eventspb.Event) bool {
			return e.GetStatus().GetStatus() == eventspb.StepStatus_STEP_STATUS_UPLOADING_OUTPUTS
		})
		time.Sleep(3 * time.Second)
		backAt := time.Now()
		Expect(proxy.Up()).To(Succeed())

		evs, fin := atc.waitFinished(a.StepID, 3*time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_SUCCEEDED), "%s\nsidecar log:\n%s", describe(evs), r.sidecarLog.String())
		for _, e := range evs {
			if e.GetOutputUploaded() != nil {
				Expect(e.GetTime().AsTime()).To(BeTemporally(">=", backAt), "the upload could only finish once MinIO was back")
			}
		}
		Expect(r.wait(30 * time.Second)).To(Equal(0))

		// The artifact is complete: download it and compare with the checksum the step wrote.
		out := fin.GetOutputs()[0]
		dir := GinkgoT().TempDir()
		_, err = blobstore.DownloadDir(ctx, store, out.GetKey(), out.GetDigest(), dir)
		Expect(err).NotTo(HaveOccurred())
		want, err := os.ReadFile(filepath.Join(dir, "blob.sha256"))
		Expect(err).NotTo(HaveOccurred())
		Expect(fileSHA256(filepath.Join(dir, "blob"))).To(Equal(strings.TrimSpace(string(want))))
	})

	It("fails with a clear error before the process starts when an input is missing", func() {
		marker := filepath.Join(GinkgoT().TempDir(), "ran")
		a := newAction("missing-input", "sh", "-c", "touch "+marker)
		a.Inputs = []action.Input{{Name: "repo", Path: "repo", Key: blobstore.NewBlobKey("main", "never-written")}}
		r := runStep(atc, a, stepOptions{blob: blobCfg})
		evs, fin := atc.waitFinished(a.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_ERRORED))
		Expect(fin.GetError()).To(ContainSubstring(`input "repo"`))
		Expect(fin.GetError()).To(ContainSubstring("not found"))
		Expect(exitedOf(evs)).To(BeNil(), "the process never started")
		Expect(r.wait(30 * time.Second)).NotTo(Equal(0))
		Expect(marker).NotTo(BeAnExistingFile())
		Expect(r.entryStderr.String()).To(ContainSubstring(`input "repo"`))
	})

	It("refuses an artifact that would write outside its directory", func(ctx SpecContext) {
		key := putRawArtifact(ctx, []tarEntry{
			{name: "ok.txt", body: "fine"},
			{name: "../../escaped.txt", body: "should never land"},
		})
		marker := filepath.Join(GinkgoT().TempDir(), "ran")
		a := newAction("traversal", "sh", "-c", "touch "+marker)
		a.Inputs = []action.Input{{Name: "evil", Path: "evil", Key: key}}
		r := runStep(atc, a, stepOptions{blob: blobCfg})
		_, fin := atc.waitFinished(a.StepID, time.Minute)
		Expect(fin.GetResult()).To(Equal(eventspb.Result_RESULT_ERRORED))
		Expect(fin.GetError()).To(ContainSubstring(`input "evil"`))
		Expect(fin.GetError()).To(ContainSubstring("escaped.txt"))
		r.wait(30 * time.Second)
		Expect(marker).NotTo(BeAnExistingFile())
		Expect(filepath.Join(a.WorkDir, "..", "escaped.txt")).NotTo(BeAnExistingFile())
		Expect(filepath.Join(filepath.Dir(a.WorkDir), "..", "escaped.txt")).NotTo(BeAnExistingFile())
	})

	It("lets a person intercept the finished step until it is released", func(ctx SpecContext) {
		a := newAction("intercept", "sh", "-c", `mkdir -p out && echo kept > out/state && exit 5`)
		a.KeepAlive = action.Duration{Duration: 5 * time.Minute}
		r := runStep(atc, a, stepOptions{blob: blobCfg})
		atc.waitFinished(a.StepID, time.Minute)
		Consistently(r.EntrypointDone).WithTimeout(time.Second).ShouldNot(BeClosed(), "the step stays for intercept")

		// A plain session: stdin in, stdout and exit status out.
		sess, err := atc.server().OpenSession(ctx, a.StepID, &eventspb.SessionOpen{Command: []string{"sh"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(sess.Input([]byte("cat out/state; echo \"user=$(id -u)\"; exit 4\n"), true)).To(Succeed())
		out, status := collectSession(ctx, sess.Next)
		Expect(out).To(Equal(fmt.Sprintf("kept\nuser=%d\n", os.Getuid())))
		Expect(status).To(Equal(int32(4)))

		// A TTY session, as `intercept` opens by default.
		tty, err := atc.server().OpenSession(ctx, a.StepID, &eventspb.SessionOpen{Command: []string{"sh"}, Tty: true, Rows: 30, Cols: 100})
		Expect(err).NotTo(HaveOccurred())
		Expect(tty.Input([]byte("echo $((6*7)); stty size; exit 0\n"), false)).To(Succeed())
		out, status = collectSession(ctx, tty.Next)
		Expect(out).To(ContainSubstring("42"))
		Expect(out).To(ContainSubstring("30 100"))
		Expect(status).To(BeZero())

		Expect(atc.server().Release(a.StepID)).To(Succeed())
		Expect(r.wait(30*time.Second)).To(Equal(5), "released, the wrapper exits with the step's exit code")
	})
})

// alive reports whether pid runs (a zombie waiting for its reaper does not).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func childPID(stdout string) int {
	for _, line := range strings.Split(stdout, "\n") {
		if rest, ok := strings.CutPrefix(line, "child "); ok {
			pid, err := strconv.Atoi(rest)
			Expect(err).NotTo(HaveOccurred())
			return pid
		}
	}
	Fail("no child pid in output: " + stdout)
	return 0
}

func collectSession(ctx context.Context, next func(context.Context) (*eventspb.SessionOutput, bool, error)) (string, int32) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var b strings.Builder
	for {
		out, ok, err := next(ctx)
		Expect(err).NotTo(HaveOccurred(), "session output so far: %q", b.String())
		Expect(ok).To(BeTrue(), "session ended without an exit status; output %q", b.String())
		Expect(out.GetError()).To(BeEmpty())
		b.Write(out.GetData())
		if out.GetExited() {
			return b.String(), out.GetExitStatus()
		}
	}
}

func readZstdObject(ctx context.Context, key string) string {
	rc, _, err := store.Get(ctx, key)
	Expect(err).NotTo(HaveOccurred())
	defer rc.Close()
	dec, err := zstd.NewReader(rc)
	Expect(err).NotTo(HaveOccurred())
	defer dec.Close()
	b, err := io.ReadAll(dec)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

func fileSHA256(path string) string {
	f, err := os.Open(path)
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	Expect(err).NotTo(HaveOccurred())
	return hex.EncodeToString(h.Sum(nil))
}

type tarEntry struct{ name, body string }

// putRawArtifact stores a hand-made tar.zst (bypassing UploadDir, which
// would never produce a hostile one) under a random artifact key.
func putRawArtifact(ctx context.Context, entries []tarEntry) string {
	var buf bytes.Buffer
	enc, err := zstd.NewWriter(&buf)
	Expect(err).NotTo(HaveOccurred())
	tw := tar.NewWriter(enc)
	for _, e := range entries {
		Expect(tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg})).To(Succeed())
		_, err := tw.Write([]byte(e.body))
		Expect(err).NotTo(HaveOccurred())
	}
	Expect(tw.Close()).To(Succeed())
	Expect(enc.Close()).To(Succeed())
	key := blobstore.NewBlobKey("main", "test")
	_, err = store.Put(ctx, key, bytes.NewReader(buf.Bytes()), int64(buf.Len()), blobstore.PutOptions{})
	Expect(err).NotTo(HaveOccurred())
	return key
}
