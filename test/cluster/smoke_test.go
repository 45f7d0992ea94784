package cluster_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Each spec gets this long; pods here start in about a second.
const specTimeout = 90 * time.Second

var _ = Describe("the local cluster", func() {
	It("runs a step-shaped pod to Succeeded and stops its sidecar after the main container", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		work := []corev1.VolumeMount{{Name: "work", MountPath: "/work"}}
		tools := corev1.VolumeMount{Name: "tools", MountPath: "/tools"}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "step"},
			Spec: corev1.PodSpec{
				RestartPolicy:                 corev1.RestartPolicyNever,
				DNSPolicy:                     corev1.DNSDefault,
				TerminationGracePeriodSeconds: new(int64(10)),
				Volumes: []corev1.Volume{
					{Name: "tools", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				},
				InitContainers: []corev1.Container{
					{
						// Like `porter install`: copy a binary into a shared volume.
						// `env` (/usr/bin/env) is exec'd directly, not through sh,
						// which would run busybox applets even if the image's applet
						// links were broken.
						Name: "install", Image: busyboxImage, ImagePullPolicy: corev1.PullNever,
						Command:      []string{"env", "sh", "-c", "cp /bin/busybox /tools/busybox && echo installed"},
						VolumeMounts: []corev1.VolumeMount{tools},
					},
					{
						// A native sidecar: an init container that keeps running.
						Name: "sidecar", Image: busyboxImage, ImagePullPolicy: corev1.PullNever,
						RestartPolicy: new(corev1.ContainerRestartPolicyAlways),
						Command: []string{"sh", "-c", `trap 'echo sidecar got TERM; exit 0' TERM
echo inputs-ready > /work/ready; echo sidecar ready
while true; do sleep 1; done`},
						VolumeMounts: work,
					},
				},
				Containers: []corev1.Container{{
					Name: "main", Image: busyboxImage, ImagePullPolicy: corev1.PullNever,
					Command: []string{"/tools/busybox", "sh", "-c",
						`until [ -f /work/ready ]; do sleep 0.1; done; echo "main saw $(cat /work/ready)"; echo main done`},
					VolumeMounts: append([]corev1.VolumeMount{tools}, work...),
				}},
			},
		}
		createPod(ctx, ns, pod)

		done := waitForPod(ctx, ns, pod.Name, podFinished)

		sidecar := terminated(done.Status.InitContainerStatuses, "sidecar")
		main := terminated(done.Status.ContainerStatuses, "main")
		Expect(main).NotTo(BeNil(), "main container status: %s", describePod(done))
		Expect(main.ExitCode).To(BeZero())
		Expect(sidecar).NotTo(BeNil(), "the sidecar must be terminated once the pod Succeeded: %s", describePod(done))
		Expect(sidecar.ExitCode).To(BeZero(), "the sidecar handles TERM and exits 0")
		Expect(sidecar.FinishedAt.Time).NotTo(BeTemporally("<", main.FinishedAt.Time),
			"the sidecar must stop after the main container")

		Expect(containerLogs(ctx, ns, pod.Name, "install")).To(Equal("installed\n"))
		Expect(containerLogs(ctx, ns, pod.Name, "sidecar")).To(Equal("sidecar ready\nsidecar got TERM\n"))
		Expect(containerLogs(ctx, ns, pod.Name, "main")).To(Equal("main saw inputs-ready\nmain done\n"))
	}, SpecTimeout(specTimeout))

	It("reports ErrImageNeverPull for an image that is not there", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		pod := busyboxPod("missing-image", "true")
		pod.Spec.Containers[0].Image = "porter.local/does-not-exist:never"
		createPod(ctx, ns, pod)

		waitForPod(ctx, ns, pod.Name, func(p *corev1.Pod) (bool, error) {
			for _, s := range p.Status.ContainerStatuses {
				if s.State.Waiting != nil && s.State.Waiting.Reason == "ErrImageNeverPull" {
					return true, nil
				}
			}
			return false, nil
		})
	}, SpecTimeout(specTimeout))

	It("deletes a running pod within seconds", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		// The trap makes the shell (PID 1, which ignores TERM by default) exit on TERM.
		pod := busyboxPod("running", "trap 'exit 0' TERM; echo started; while true; do sleep 1; done")
		createPod(ctx, ns, pod)
		waitForPod(ctx, ns, pod.Name, podRunning)

		start := time.Now()
		Expect(env.client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{})).To(Succeed())
		gone, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		waitForPodGone(gone, ns, pod.Name)
		GinkgoWriter.Printf("running pod deleted in %s\n", time.Since(start).Round(time.Millisecond))
	}, SpecTimeout(specTimeout))

	It("lets a pod reach a server on the host at the node IP", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		token := randomToken()
		lis, err := net.Listen("tcp", net.JoinHostPort(env.nodeIP, "0"))
		Expect(err).NotTo(HaveOccurred(), "listening on the node IP %s", env.nodeIP)
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				fmt.Fprint(w, token)
			}),
			ReadHeaderTimeout: 5 * time.Second,
		}
		go srv.Serve(lis) //nolint:errcheck // returns ErrServerClosed at cleanup
		DeferCleanup(srv.Close)

		// busybox-static's `wget -T` crashes; the spec timeout bounds the wait instead.
		pod := busyboxPod("reach-host", fmt.Sprintf("wget -q -O- http://%s/", lis.Addr()))
		createPod(ctx, ns, pod)
		waitForPod(ctx, ns, pod.Name, podFinished)
		Expect(containerLogs(ctx, ns, pod.Name, "main")).To(Equal(token))
	}, SpecTimeout(specTimeout))

	It("serves MinIO to the host and to pods", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		client, err := minio.New(env.minio.endpoint, &minio.Options{
			Creds:  credentials.NewStaticV4(env.minio.accessKey, env.minio.secretKey, ""),
			Secure: false,
		})
		Expect(err).NotTo(HaveOccurred(), "creating a MinIO client for %s", env.minio.endpoint)

		// From the host: the bucket exists and takes an object.
		exists, err := client.BucketExists(ctx, env.minio.bucket)
		Expect(err).NotTo(HaveOccurred(), "asking MinIO at %s for bucket %s", env.minio.endpoint, env.minio.bucket)
		Expect(exists).To(BeTrue(), "bucket %s must exist", env.minio.bucket)
		key := "smoke/" + ns + "/hello.txt"
		body := "hello from the host " + randomToken()
		_, err = client.PutObject(ctx, env.minio.bucket, key, bytes.NewReader([]byte(body)), int64(len(body)), minio.PutObjectOptions{})
		Expect(err).NotTo(HaveOccurred(), "uploading %s", key)
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.RemoveObject(ctx, env.minio.bucket, key, minio.RemoveObjectOptions{})).To(Succeed())
		})

		// From a pod: an authenticated (presigned) GET of that object, at the
		// address pods use.
		podClient, err := minio.New(env.minio.podEndpoint, &minio.Options{
			Creds: credentials.NewStaticV4(env.minio.accessKey, env.minio.secretKey, ""),
		})
		Expect(err).NotTo(HaveOccurred(), "creating a MinIO client for %s", env.minio.podEndpoint)
		url, err := podClient.PresignedGetObject(ctx, env.minio.bucket, key, 5*time.Minute, nil)
		Expect(err).NotTo(HaveOccurred(), "presigning a GET of %s", key)
		pod := busyboxPod("reach-minio", fmt.Sprintf("wget -q -O- '%s'", url.String()))
		createPod(ctx, ns, pod)
		waitForPod(ctx, ns, pod.Name, podFinished)
		Expect(containerLogs(ctx, ns, pod.Name, "main")).To(Equal(body))
	}, SpecTimeout(specTimeout))
})

func randomToken() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
