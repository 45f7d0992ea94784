package gitserver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// InClusterImage is the git server's image, built and imported into the
// cluster's containerd by `hack/images.sh git-server` (never pushed: the
// pod does not pull it).
const InClusterImage = "porter.local/git-server:dev"

const inClusterPort = 8080

// InCluster is a real git server in a pod of the local cluster: git's own
// `git http-backend` (Debian's git, image InClusterImage), serving smart HTTP
// to step pods and to the host alike at the pod's IP. Each repository's
// post-receive hook calls the webhooks it was created with, as a forge
// calls Concourse's check webhook.
//
//	srv, err := gitserver.StartInCluster(ctx, kube, namespace)
//	defer srv.Close(ctx)
//	srv.CreateRepo(ctx, "app", "main", webhookURL)
//	w, err := srv.Work(ctx, dir, "app", "main")   // commit on the host, push to the pod
type InCluster struct {
	kube kubernetes.Interface
	ns   string
	pod  string
	base string // http://POD_IP:PORT
	http *http.Client
}

// StartInCluster starts the server's pod in namespace and waits until it
// answers. Close deletes the pod (also needed after a failed start).
func StartInCluster(ctx context.Context, kube kubernetes.Interface, namespace string) (*InCluster, error) {
	name := "git-server-" + strings.ToLower(rand.Text()[:6])
	s := &InCluster{kube: kube, ns: namespace, pod: name, http: &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 30 * time.Second}}
	no, yes, nobody := false, true, int64(65534)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": "git-server"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &yes, RunAsUser: &nobody, RunAsGroup: &nobody,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:  "git",
				Image: InClusterImage,
				// Imported into containerd by hack/images.sh, never in a registry.
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"-listen", fmt.Sprintf(":%d", inClusterPort), "-root", "/srv/git"},
				Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: inClusterPort}},
				VolumeMounts:    []corev1.VolumeMount{{Name: "repos", MountPath: "/srv/git"}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/_health", Port: intstr.FromInt32(inClusterPort)}},
					PeriodSeconds: 1,
				},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi"),
				}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			Volumes: []corev1.Volume{{Name: "repos", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	if _, err := kube.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("in-cluster git server: create pod %s/%s: %w", namespace, name, err)
	}
	ip, err := s.waitReady(ctx, 2*time.Minute)
	if err != nil {
		return s, err
	}
	s.base = "http://" + net.JoinHostPort(ip, fmt.Sprint(inClusterPort))
	return s, nil
}

// waitReady polls the pod until it is ready and returns its IP.
func (s *InCluster) waitReady(ctx context.Context, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		pod, err := s.kube.CoreV1().Pods(s.ns).Get(ctx, s.pod, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("in-cluster git server: pod %s/%s: %w", s.ns, s.pod, err)
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && pod.Status.PodIP != "" {
				return pod.Status.PodIP, nil
			}
		}
		for _, st := range pod.Status.ContainerStatuses {
			if w := st.State.Waiting; w != nil && (w.Reason == "ErrImageNeverPull" || w.Reason == "CreateContainerError") {
				return "", fmt.Errorf("in-cluster git server: pod %s/%s: %s: %s (build the image: hack/images.sh git-server)", s.ns, s.pod, w.Reason, w.Message)
			}
		}
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			return "", fmt.Errorf("in-cluster git server: pod %s/%s ended (%s)", s.ns, s.pod, pod.Status.Phase)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("in-cluster git server: pod %s/%s not ready (phase %s): %w", s.ns, s.pod, pod.Status.Phase, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// URL is the clone URL of repository name, for step pods and the host.
func (s *InCluster) URL(name string) string { return fmt.Sprintf("%s/%s.git", s.base, name) }

// CreateRepo creates an empty bare repository whose HEAD names branch, open
// to anonymous pushes; its post-receive hook POSTs to each webhook URL
// (which must be reachable from pods: the host by the node's IP).
func (s *InCluster) CreateRepo(ctx context.Context, name, branch string, webhooks ...string) error {
	q := url.Values{"branch": {branch}, "webhook": webhooks}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/_repos/"+url.PathEscape(name)+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("in-cluster git server: create repository %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("in-cluster git server: create repository %s: %s: %s", name, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// Work makes a working repository in dir (existing, empty) on branch of
// repository name, pushing to the pod over smart HTTP.
func (s *InCluster) Work(ctx context.Context, dir, name, branch string) (*Work, error) {
	return NewWork(ctx, dir, s.URL(name), branch)
}

// Close deletes the pod and waits until it is gone; the pod's log goes to
// stderr first when the server did not start.
func (s *InCluster) Close(ctx context.Context) error {
	if s.base == "" {
		if logs, err := s.kube.CoreV1().Pods(s.ns).GetLogs(s.pod, &corev1.PodLogOptions{}).DoRaw(ctx); err == nil && len(logs) > 0 {
			fmt.Fprintf(os.Stderr, "log of the in-cluster git server %s/%s:\n%s\n", s.ns, s.pod, logs)
		}
	}
	zero := int64(0)
	err := s.kube.CoreV1().Pods(s.ns).Delete(ctx, s.pod, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("in-cluster git server: delete pod %s/%s: %w", s.ns, s.pod, err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		_, err := s.kube.CoreV1().Pods(s.ns).Get(ctx, s.pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("in-cluster git server: pod %s/%s still there", s.ns, s.pod), err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
