package runtime_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/test/testenv"
)

// Step pod hardening on the real cluster: Concourse's container_limits,
// the Pod Security Standards the pods pass, the bounds on step storage and
// on extraction. A server of its own runs this tree's sidecar (the caps are
// the sidecar's) in a namespace enforcing the baseline level, with small
// bounds: 32Mi per step volume, 16 MiB per extracted artifact.
var _ = Describe("step pod hardening", Ordered, ContinueOnFailure, func() {
	const (
		volumeLimit  = "32Mi"
		extractBytes = 16 << 20
	)
	BeforeAll(func(ctx SpecContext) {
		env, err := testenv.NewATCEnv(ctx, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		ns, removeNS, err := env.NewWorkerNamespace(ctx, "porter-podhard-")
		DeferCleanup(removeNS)
		Expect(err).NotTo(HaveOccurred())
		Expect(testenv.SetPodSecurity(ctx, env.Admin, ns.Name, "baseline")).To(Succeed())
		dsn, dropDB, err := env.NewDatabase(ctx)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(dropDB)
		image, removeImage, err := testenv.BuildPorterImage(ctx, GinkgoT().TempDir(), "podhard")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(removeImage)

		own, err := env.NewATC(testenv.ATCConfig{
			Worker: ns, Database: dsn, Bucket: ns.Name,
			LocalUsers: []string{user + ":" + password}, MainTeamUsers: []string{user},
			Args: []string{"--porter-image", image,
				"--step-volume-size-limit", volumeLimit,
				"--step-max-extract-bytes", strconv.Itoa(extractBytes)},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(own.Start(ctx)).To(Succeed())
		DeferCleanup(func(context.Context) {
			Expect(own.Stop()).To(Succeed())
			GinkgoWriter.Printf("podhard server log:\n%s\n", own.Log())
		})
		// The suite's helpers (porter, stepPod, ...) follow these.
		suiteServer, suiteNamespace := server, namespace
		server, namespace = own, ns.Name
		DeferCleanup(func() { server, namespace = suiteServer, suiteNamespace })
	})
	BeforeEach(func(ctx SpecContext) {
		res := porter(ctx, "login", "-c", server.URL(), "-u", user, "-p", password)
		Expect(res.Code).To(Equal(0), res.String())
	})

	It("maps container_limits as Concourse means them: cpu shares a request, 0 unlimited", func(ctx SpecContext) {
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+`container_limits: {cpu: 512, memory: 256MB}
run: {path: echo, args: [limited]}
`))
		Expect(res.Code).To(Equal(0), res.String())
		r := podContainer(stepPod(ctx, buildID(res.Stdout)), podspec.StepContainerName).Resources
		Expect(r.Requests.Cpu().Cmp(resource.MustParse("500m"))).To(Equal(0), "cpu request %s", r.Requests.Cpu())
		Expect(r.Limits).NotTo(HaveKey(corev1.ResourceCPU), "512 shares are a weight, not a cap")
		Expect(r.Limits.Memory().Cmp(resource.MustParse("256Mi"))).To(Equal(0), "memory limit %s", r.Limits.Memory())

		res = porter(ctx, "execute", "-c", taskFile(busyboxTask+`container_limits: {cpu: 0, memory: 0}
run: {path: echo, args: [unlimited]}
`))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(taskOutput(res.Stdout)).To(Equal("unlimited\n"))
		r = podContainer(stepPod(ctx, buildID(res.Stdout)), podspec.StepContainerName).Resources
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			Expect(r.Requests).NotTo(HaveKey(name))
			Expect(r.Limits).NotTo(HaveKey(name))
		}
	})

	It("runs a numeric non-root run.user in a restricted pod: inputs, outputs and the control socket work", func(ctx SpecContext) {
		in, out := GinkgoT().TempDir(), GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(in, "hello"), []byte("hello from input\n"), 0o644)).To(Succeed())
		res := porter(ctx, "execute", "-i", "in="+in, "-o", "out="+out, "-c", taskFile(busyboxTask+`inputs: [{name: in}]
outputs: [{name: out}]
run:
  user: "1000:1000"
  path: sh
  args: ["-ec", "id -u; echo more >> in/hello; cp in/hello out/copy; echo secret > out/private; chmod 600 out/private"]
`))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(taskOutput(res.Stdout)).To(Equal("1000\n"))
		Expect(os.ReadFile(filepath.Join(out, "copy"))).To(Equal([]byte("hello from input\nmore\n")))
		Expect(os.ReadFile(filepath.Join(out, "private"))).To(Equal([]byte("secret\n")), "the sidecar runs as the step's user and reads its 0600 files")
		pod := stepPod(ctx, buildID(res.Stdout))
		Expect(pod.Spec.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()))
		Expect(pod.Spec.SecurityContext.RunAsUser).To(HaveValue(Equal(int64(1000))))
	})

	It("runs a root image's step under the baseline level, reading a 0600 output of root", func(ctx SpecContext) {
		out := GinkgoT().TempDir()
		res := porter(ctx, "execute", "-o", "out="+out, "-c", taskFile(busyboxTask+`outputs: [{name: out}]
run:
  path: sh
  args: ["-ec", "id -u; echo secret > out/private; chmod 600 out/private; chown 1234 out/private"]
`))
		Expect(res.Code).To(Equal(0), res.String())
		Expect(taskOutput(res.Stdout)).To(Equal("0\n"))
		Expect(os.ReadFile(filepath.Join(out, "private"))).To(Equal([]byte("secret\n")))
		sidecar := podContainer(stepPod(ctx, buildID(res.Stdout)), podspec.SidecarContainerName)
		Expect(sidecar.SecurityContext.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()))
	})

	It("refuses a privileged step at once on a worker whose config does not allow it, naming the worker and the setting", func(ctx SpecContext) {
		res := porter(ctx, "execute", "-p", "-c", taskFile(busyboxTask+`run: {path: echo, args: [never]}
`))
		Expect(res.Code).NotTo(Equal(0), res.String())
		Expect(res.Stdout).To(ContainSubstring("the workers are e2e (platform linux, privileged steps not allowed)"), res.String())
		Expect(res.Stdout).To(ContainSubstring("privileged: allow"))
		Expect(res.Stdout).NotTo(ContainSubstring("never\n"))
	})

	It("drops NET_RAW from an unprivileged step, keeping the other default capabilities", func(ctx SpecContext) {
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+`run: {path: sh, args: [-c, "grep CapEff /proc/self/status"]}
`))
		Expect(res.Code).To(Equal(0), res.String())
		m := regexp.MustCompile(`CapEff:\s*([0-9a-f]+)`).FindStringSubmatch(res.Stdout)
		Expect(m).NotTo(BeNil(), res.String())
		caps, err := strconv.ParseUint(m[1], 16, 64)
		Expect(err).NotTo(HaveOccurred())
		const capChown, capNetRaw = 0, 13
		Expect(caps&(1<<capNetRaw)).To(BeZero(), "CapEff %s has NET_RAW", m[1])
		Expect(caps&(1<<capChown)).NotTo(BeZero(), "CapEff %s: a root step keeps CHOWN", m[1])
	})

	It("fails a step writing more than the volume size limit into its working directory", func(ctx SpecContext) {
		res := porter(ctx, "execute", "-c", taskFile(busyboxTask+`run:
  path: sh
  args: ["-c", "dd if=/dev/zero of=big bs=1M count=64 2>/dev/null; echo written; sleep 300"]
`))
		Expect(res.Code).NotTo(Equal(0), res.String())
		id := buildID(res.Stdout)
		Expect(endedStatus(ctx, id)).NotTo(Equal(concourse.StatusSucceeded))
		Expect(res.Stdout).NotTo(ContainSubstring("succeeded"))
		// The kubelet evicted the pod, naming the volume and its limit, and
		// the build says so, rather than the sidecar's "entrypoint went away"
		// (the ATC waits for the kubelet's reason before showing an error).
		Expect(res.Stdout).To(ContainSubstring(`exceeds the limit`), res.String())
		Expect(res.Stdout).NotTo(ContainSubstring("entrypoint went away"), res.String())
		pod := stepPod(ctx, id)
		Expect(pod.Status.Reason).To(Equal("Evicted"), "pod status %+v", pod.Status)
		Expect(pod.Status.Message).To(And(ContainSubstring(`volume "workdir" exceeds the limit`), ContainSubstring(volumeLimit)))
	}, SpecTimeout(4*time.Minute))

	It("refuses an input that expands beyond the extraction cap (a zstd bomb), naming the cap", func(ctx SpecContext) {
		in := GinkgoT().TempDir()
		// 256 MiB of zeros, sparse on this disk, a few KiB compressed.
		f, err := os.Create(filepath.Join(in, "bomb"))
		Expect(err).NotTo(HaveOccurred())
		Expect(f.Truncate(256 << 20)).To(Succeed())
		Expect(f.Close()).To(Succeed())
		res := porter(ctx, "execute", "-i", "in="+in, "-c", taskFile(busyboxTask+`inputs: [{name: in}]
run: {path: echo, args: [never]}
`))
		Expect(res.Code).NotTo(Equal(0), res.String())
		Expect(res.Stdout).NotTo(ContainSubstring("never\n"))
		msgs := strings.Join(errorMessages(buildEvents(ctx, buildID(res.Stdout))), "\n")
		Expect(msgs).To(And(ContainSubstring("extraction limit exceeded"), ContainSubstring(strconv.Itoa(extractBytes)+" bytes")), res.String())
	})

	It("passes the Pod Security level each golden shape claims (server-side dry run)", func(ctx SpecContext) {
		levels := map[string]string{}
		for _, level := range []string{"baseline", "restricted"} {
			ns, err := testenv.CreateNamespace(ctx, admin, "porter-psa-"+level+"-")
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(func(ctx context.Context) {
				Expect(admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})).To(Succeed())
			})
			Expect(testenv.SetPodSecurity(ctx, admin, ns, level)).To(Succeed())
			levels[level] = ns
		}
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		for _, c := range podspec.GoldenCases() {
			if c.Worker.Platform == "windows" {
				continue
			}
			_, _, restricted := podspec.NonRootUser(c.Action.Run.User)
			for level, ns := range levels {
				c.Worker.Namespace = ns
				pod, _, err := podspec.Build(c.Action, c.Worker, c.Secrets)
				Expect(err).NotTo(HaveOccurred())
				_, err = admin.CoreV1().Pods(ns).Create(ctx, pod, dry)
				switch {
				case c.Action.Privileged:
					Expect(err).To(MatchError(ContainSubstring("violates PodSecurity")), "%s under %s", c.Name, level)
				case level == "baseline" || restricted:
					Expect(err).NotTo(HaveOccurred(), "%s under %s", c.Name, level)
				default:
					Expect(err).To(MatchError(ContainSubstring("violates PodSecurity")), "%s under %s: a root image's step is not restricted", c.Name, level)
				}
			}
		}
	})
})
