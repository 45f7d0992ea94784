package cluster_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/porter-ci/porter/test/testenv"
)

var _ = Describe("the local cluster's registry", func() {
	var (
		registry, pushRegistry string // where pods pull; where the host pushes
		transport              http.RoundTripper
	)
	BeforeEach(func(ctx SpecContext) {
		registry = testenv.Registry(GinkgoT())
		var err error
		pushRegistry, err = testenv.RegistryPushAddr(ctx)
		Expect(err).NotTo(HaveOccurred())
		// The registry is on this host: never through a proxy from the environment.
		tr := remote.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		transport = tr
	})

	// pushRandomImage pushes a two-layer image: a static busybox (the same layer
	// every run) and /hello.txt holding body (new every run, so the digest is
	// too) through the push address. It returns the tag and digest references
	// as pods pull them and deletes the image afterwards.
	pushRandomImage := func(ctx context.Context, repo, body string) (name.Tag, name.Digest) {
		bb, err := os.ReadFile("/bin/busybox")
		Expect(err).NotTo(HaveOccurred(), "reading the host's static busybox")
		img, err := mutate.AppendLayers(
			mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON),
			static.NewLayer(tarOf("bin/busybox", bb, 0o755), types.OCIUncompressedLayer),
			static.NewLayer(tarOf("hello.txt", []byte(body), 0o644), types.OCIUncompressedLayer),
		)
		Expect(err).NotTo(HaveOccurred(), "assembling the image")
		cfg, err := img.ConfigFile()
		Expect(err).NotTo(HaveOccurred())
		cfg = cfg.DeepCopy()
		cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
		img, err = mutate.ConfigFile(img, cfg)
		Expect(err).NotTo(HaveOccurred(), "setting the platform")

		path := fmt.Sprintf("%s:%s", repo, randomToken())
		push, err := name.NewTag(pushRegistry+"/"+path, name.Insecure)
		Expect(err).NotTo(HaveOccurred())
		Expect(remote.Write(push, img, remote.WithContext(ctx), remote.WithTransport(transport))).To(Succeed(), "pushing %s", push)
		digest, err := img.Digest()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) {
			ref := push.Context().Digest(digest.String())
			Expect(remote.Delete(ref, remote.WithContext(ctx), remote.WithTransport(transport))).To(Succeed(), "deleting %s", ref)
		})
		tag, err := name.NewTag(registry+"/"+path, name.Insecure)
		Expect(err).NotTo(HaveOccurred())
		return tag, tag.Context().Digest(digest.String())
	}

	It("serves an image pushed with go-containerregistry to a pod, pulled by digest through containerd", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		body := "hello from the registry " + randomToken()
		_, ref := pushRandomImage(ctx, "porter-test/registry-smoke", body)

		pod := busyboxPod("pull-by-digest", "")
		pod.Spec.Containers[0].Image = ref.String()
		// The kubelet has never seen this digest, so containerd must pull it.
		pod.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
		pod.Spec.Containers[0].Command = []string{"/bin/busybox", "cat", "/hello.txt"}
		createPod(ctx, ns, pod)
		waitForPod(ctx, ns, pod.Name, podFinished)
		Expect(containerLogs(ctx, ns, pod.Name, "main")).To(Equal(body))
	}, SpecTimeout(specTimeout))

	It("answers pods at the same address as the host", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		tag, _ := pushRandomImage(ctx, "porter-test/registry-reach", randomToken())
		// What a resource type's check does from its pod: list the tags.
		pod := busyboxPod("reach-registry", fmt.Sprintf("wget -q -O- http://%s/v2/%s/tags/list", registry, tag.RepositoryStr()))
		createPod(ctx, ns, pod)
		waitForPod(ctx, ns, pod.Name, podFinished)
		Expect(containerLogs(ctx, ns, pod.Name, "main")).To(MatchJSON(
			fmt.Sprintf(`{"name": %q, "tags": [%q]}`, tag.RepositoryStr(), tag.TagStr())))
	}, SpecTimeout(specTimeout))

	// Every team's registry-image uses this registry as its Docker Hub
	// mirror: a step that could overwrite library/busybox would run its
	// code in every team's builds.
	It("refuses a push from a pod: pods pull, only the host pushes", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		// Starting a blob upload is the first request of any push.
		pod := busyboxPod("push-from-pod", fmt.Sprintf(
			"wget -q -O- --post-data '' http://%s/v2/library/busybox/blobs/uploads/ 2>&1; echo exit=$?", registry))
		createPod(ctx, ns, pod)
		waitForPod(ctx, ns, pod.Name, podFinished)
		out := containerLogs(ctx, ns, pod.Name, "main")
		Expect(out).To(ContainSubstring("405"), "the registry pods reach must refuse uploads")
		Expect(out).NotTo(ContainSubstring("exit=0"))
		// Nor from the host at that address: only the push address (the
		// node's loopback, which pods cannot reach) takes uploads.
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+registry+"/v2/library/busybox/blobs/uploads/", nil)
		Expect(err).NotTo(HaveOccurred())
		resp, err := (&http.Client{Transport: transport}).Do(req)
		Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusMethodNotAllowed))
		Expect(pushRegistry).NotTo(Equal(registry), "PORTER_CLUSTER_REGISTRY_PUSH")
		host, _, err := net.SplitHostPort(pushRegistry)
		Expect(err).NotTo(HaveOccurred())
		Expect(net.ParseIP(host).IsLoopback()).To(BeTrue(), "the push address %s is the node's loopback", pushRegistry)
	}, SpecTimeout(specTimeout))
})

// tarOf is an uncompressed layer of one regular file (and its parent
// directories), dated at the Unix epoch so the same file gives the same digest.
func tarOf(name string, content []byte, mode int64) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var dirs []string
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		dirs = append([]string{dir}, dirs...)
	}
	for _, dir := range dirs {
		Expect(tw.WriteHeader(&tar.Header{Name: dir + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0)})).To(Succeed())
	}
	Expect(tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(content)), ModTime: time.Unix(0, 0)})).To(Succeed())
	_, err := tw.Write(content)
	Expect(err).NotTo(HaveOccurred())
	Expect(tw.Close()).To(Succeed())
	return buf.Bytes()
}
