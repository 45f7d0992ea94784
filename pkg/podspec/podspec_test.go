package podspec_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/podspec"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml from the current output")

func TestGolden(t *testing.T) {
	for _, c := range podspec.GoldenCases() {
		t.Run(c.Name, func(t *testing.T) {
			pod, secret, err := podspec.Build(c.Action, c.Worker, c.Secrets)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			got := marshalBoth(t, pod, secret)
			if c.Secrets.ImagePull != nil {
				pull, err := podspec.PullSecret(c.Action, c.Worker, *c.Secrets.ImagePull)
				if err != nil {
					t.Fatalf("PullSecret: %v", err)
				}
				p, err := yaml.Marshal(pull)
				if err != nil {
					t.Fatal(err)
				}
				got = append(append(got, "---\n"...), p...)
			}
			file := filepath.Join("testdata", c.Name+".golden.yaml")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("read golden file (regenerate with go test ./pkg/podspec -update): %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from Build's output (regenerate with -update if intended):\n--- got\n%s", file, got)
			}
		})
	}
}

func marshalBoth(t *testing.T, pod *corev1.Pod, secret *corev1.Secret) []byte {
	t.Helper()
	p, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	s, err := yaml.Marshal(secret)
	if err != nil {
		t.Fatal(err)
	}
	return append(append(p, "---\n"...), s...)
}

func buildCase(t *testing.T, name string) (podspec.Case, *corev1.Pod, *corev1.Secret) {
	t.Helper()
	for _, c := range podspec.GoldenCases() {
		if c.Name == name {
			pod, secret, err := podspec.Build(c.Action, c.Worker, c.Secrets)
			if err != nil {
				t.Fatalf("Build(%s): %v", name, err)
			}
			return c, pod, secret
		}
	}
	t.Fatalf("no golden case %q", name)
	return podspec.Case{}, nil, nil
}

func TestNoSecretValueInPod(t *testing.T) {
	for _, c := range podspec.GoldenCases() {
		t.Run(c.Name, func(t *testing.T) {
			pod, secret, err := podspec.Build(c.Action, c.Worker, c.Secrets)
			if err != nil {
				t.Fatal(err)
			}
			podYAML, err := yaml.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			values := []string{c.Secrets.StepToken, string(c.Secrets.ATCCA), c.Secrets.BlobstoreAccessKey, c.Secrets.BlobstoreSecretKey, c.Secrets.BlobstoreSessionToken}
			for _, v := range c.Secrets.Params {
				values = append(values, v)
			}
			if p := c.Secrets.ImagePull; p != nil {
				values = append(values, p.Password, base64.StdEncoding.EncodeToString([]byte(p.Username+":"+p.Password)))
			}
			for _, v := range values {
				if v != "" && bytes.Contains(podYAML, []byte(v)) {
					t.Errorf("pod spec contains secret value %q", v)
				}
			}
			// Every secret reference in the pod points at a key the Secret has.
			for _, ctr := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
				for _, e := range ctr.Env {
					if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
						continue
					}
					ref := e.ValueFrom.SecretKeyRef
					if ref.Name != secret.Name {
						t.Errorf("%s: env %s refers to Secret %q, want %q", ctr.Name, e.Name, ref.Name, secret.Name)
					}
					if _, ok := secret.Data[ref.Key]; !ok {
						t.Errorf("%s: env %s refers to missing Secret key %q", ctr.Name, e.Name, ref.Key)
					}
				}
			}
		})
	}
}

func TestObjectsAreWellFormed(t *testing.T) {
	for _, c := range podspec.GoldenCases() {
		t.Run(c.Name, func(t *testing.T) {
			pod, secret, err := podspec.Build(c.Action, c.Worker, c.Secrets)
			if err != nil {
				t.Fatal(err)
			}
			if msgs := validation.IsDNS1123Label(pod.Name); len(msgs) > 0 {
				t.Errorf("pod name %q: %v", pod.Name, msgs)
			}
			if secret.Name != pod.Name || secret.Namespace != pod.Namespace {
				t.Errorf("secret %s/%s, pod %s/%s: want the same name and namespace", secret.Namespace, secret.Name, pod.Namespace, pod.Name)
			}
			for k, v := range pod.Labels {
				if msgs := content.IsLabelValue(v); len(msgs) > 0 {
					t.Errorf("label %s=%q: %v", k, v, msgs)
				}
				if secret.Labels[k] != v {
					t.Errorf("secret label %s=%q, pod has %q", k, secret.Labels[k], v)
				}
			}
			mounted := map[string]bool{}
			for _, ctr := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
				paths := map[string]bool{}
				for _, m := range ctr.VolumeMounts {
					mounted[m.Name] = true
					if paths[m.MountPath] {
						t.Errorf("%s mounts %s twice", ctr.Name, m.MountPath)
					}
					paths[m.MountPath] = true
				}
			}
			names := map[string]bool{}
			for _, v := range pod.Spec.Volumes {
				if msgs := validation.IsDNS1123Label(v.Name); len(msgs) > 0 {
					t.Errorf("volume name %q: %v", v.Name, msgs)
				}
				if names[v.Name] {
					t.Errorf("volume %q declared twice", v.Name)
				}
				names[v.Name] = true
				if !mounted[v.Name] {
					t.Errorf("volume %q is never mounted", v.Name)
				}
			}
			// The action in the sidecar's environment is the action itself.
			decoded, err := podspec.DeclaredAction(pod)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(decoded, c.Action) {
				t.Errorf("declared action = %+v, want %+v", decoded, c.Action)
			}
		})
	}
}

func TestPodShape(t *testing.T) {
	_, pod, _ := buildCase(t, "minimal")
	spec := pod.Spec
	if spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy = %q", spec.RestartPolicy)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken is not false")
	}
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		t.Error("enableServiceLinks is not false")
	}
	if spec.DNSPolicy != corev1.DNSClusterFirst {
		t.Errorf("dnsPolicy = %q, want ClusterFirst by default", spec.DNSPolicy)
	}
	if spec.ActiveDeadlineSeconds != nil {
		t.Errorf("activeDeadlineSeconds = %d without a timeout, want none", *spec.ActiveDeadlineSeconds)
	}
	// No install init container: each one costs a kubelet relist.
	if got := containerNames(spec.InitContainers); got != "porter-sidecar" {
		t.Errorf("init containers = %s", got)
	}
	if got := containerNames(spec.Containers); got != "step" {
		t.Errorf("containers = %s", got)
	}
	sidecar := spec.InitContainers[0]
	if sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("native sidecar has no restartPolicy Always")
	}
	checkInstallHook(t, sidecar)
	if got := pod.Annotations["kubectl.kubernetes.io/default-container"]; got != "step" {
		t.Errorf("default container = %q, want step", got)
	}
	step := spec.Containers[0]
	wantCommand := "/porter/bin/porter entrypoint -- echo Hello, world!"
	if got := strings.Join(step.Command, " "); got != wantCommand {
		t.Errorf("step command = %q, want %q", got, wantCommand)
	}
	if step.WorkingDir != "/tmp/build/minimal" {
		t.Errorf("step workingDir = %q", step.WorkingDir)
	}
	// A root image's step: baseline, not restricted (see TestSecurity).
	if sc := step.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Privileged != nil ||
		sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 || strings.Join(capNames(sc.Capabilities.Drop), ",") != "NET_RAW" {
		t.Errorf("step securityContext = %+v, want allowPrivilegeEscalation false and NET_RAW dropped", sc)
	}
	if got := envValue(step, podspec.EnvSocket); got != podspec.SocketPath {
		t.Errorf("step %s = %q", podspec.EnvSocket, got)
	}
}

func TestFallbackSidecar(t *testing.T) {
	_, pod, secret := buildCase(t, "fallback-sidecar")
	if got := containerNames(pod.Spec.InitContainers); got != "" {
		t.Errorf("init containers = %s, want none", got)
	}
	// The sidecar first: the kubelet starts containers in order and runs
	// its postStart hook (the install) before it starts the step.
	if got := containerNames(pod.Spec.Containers); got != "porter-sidecar,step" {
		t.Errorf("containers = %s", got)
	}
	if rp := pod.Spec.Containers[0].RestartPolicy; rp != nil {
		t.Errorf("fallback sidecar has restartPolicy %q", *rp)
	}
	if len(secret.Data) != 1 {
		t.Errorf("secret keys = %v, want only the step token", keys(secret.Data))
	}
	sidecar := pod.Spec.Containers[0]
	checkInstallHook(t, sidecar)
	for _, name := range []string{podspec.EnvATCCAPEM, podspec.EnvBlobstoreAccessKey, podspec.EnvBlobstoreSecretKey, podspec.EnvBlobstoreToken, podspec.EnvATCServerName} {
		if hasEnv(sidecar, name) {
			t.Errorf("sidecar sets %s though no value was given", name)
		}
	}
}

// checkInstallHook checks that the sidecar copies porter into the shared
// volume before the kubelet moves on to the next container.
func checkInstallHook(t *testing.T, sidecar corev1.Container) {
	t.Helper()
	if sidecar.Lifecycle == nil || sidecar.Lifecycle.PostStart == nil || sidecar.Lifecycle.PostStart.Exec == nil {
		t.Fatal("sidecar has no postStart exec hook")
	}
	want := podspec.PorterImageBinary + " install " + podspec.PorterBinDir
	if got := strings.Join(sidecar.Lifecycle.PostStart.Exec.Command, " "); got != want {
		t.Errorf("sidecar postStart = %q, want %q", got, want)
	}
	if mountAt(sidecar, podspec.PorterDir) == "" {
		t.Errorf("sidecar does not mount %s", podspec.PorterDir)
	}
}

func TestArtifactVolumes(t *testing.T) {
	c, pod, _ := buildCase(t, "artifacts")
	sidecar := findContainer(t, pod, podspec.SidecarContainerName)
	step := findContainer(t, pod, podspec.StepContainerName)

	// Shared input/output path: one volume, mounted once per container.
	versionDir := c.Action.Dir("version")
	sidecarVol := mountAt(sidecar, versionDir)
	stepVol := mountAt(step, versionDir)
	if sidecarVol == "" || sidecarVol != stepVol {
		t.Errorf("%s: sidecar mounts %q, step mounts %q; want the same volume", versionDir, sidecarVol, stepVol)
	}
	for _, dir := range []string{c.Action.Dir("repo"), c.Action.Dir("built"), c.Action.Dir("repo/.cache/go-build")} {
		if mountAt(sidecar, dir) == "" || mountAt(sidecar, dir) != mountAt(step, dir) {
			t.Errorf("%s: sidecar mounts %q, step mounts %q", dir, mountAt(sidecar, dir), mountAt(step, dir))
		}
	}
	// The optional input nobody provided gets no directory.
	if v := mountAt(step, c.Action.Dir("extra")); v != "" {
		t.Errorf("unprovided optional input is mounted from %q", v)
	}
	// porter + workdir + journal + repo + version + built + cache + the sidecar's tmp.
	if n := len(pod.Spec.Volumes); n != 8 {
		t.Errorf("%d volumes, want 8: %v", n, pod.Spec.Volumes)
	}
	// The audit journal is the sidecar's alone: step code cannot edit it.
	if v := mountAt(sidecar, podspec.JournalDir); v == "" {
		t.Errorf("sidecar does not mount %s", podspec.JournalDir)
	} else {
		for _, m := range step.VolumeMounts {
			if m.Name == v {
				t.Errorf("step container mounts the journal's volume %q at %s", v, m.MountPath)
			}
		}
	}
	if e := findEnv(t, sidecar, podspec.EnvJournalDir); e.Value != podspec.JournalDir {
		t.Errorf("%s = %q", podspec.EnvJournalDir, e.Value)
	}
	if mountAt(step, c.Action.WorkDir) == "" {
		t.Error("step does not mount its work directory")
	}
	for _, ctr := range []corev1.Container{sidecar, step} {
		if mountAt(ctr, podspec.PorterDir) == "" {
			t.Errorf("%s does not mount %s", ctr.Name, podspec.PorterDir)
		}
	}
}

func TestParams(t *testing.T) {
	c, pod, secret := buildCase(t, "params")
	step := findContainer(t, pod, podspec.StepContainerName)
	var names []string
	for _, e := range step.Env {
		names = append(names, e.Name)
	}
	want := "APP,EMPTY,REGION,AWS_SECRET_ACCESS_KEY,DEPLOY_TOKEN,PORTER_SOCKET"
	if got := strings.Join(names, ","); got != want {
		t.Errorf("step env names = %s, want %s", got, want)
	}
	for _, name := range c.Action.SecretParams {
		e := findEnv(t, step, name)
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("%s is not taken from the Secret: %+v", name, e)
			continue
		}
		if got := string(secret.Data[e.ValueFrom.SecretKeyRef.Key]); got != c.Secrets.Params[name] {
			t.Errorf("Secret key for %s holds %q, want %q", name, got, c.Secrets.Params[name])
		}
	}
	if got := findEnv(t, step, "REGION").Value; got != "eu-west-1" {
		t.Errorf("REGION = %q", got)
	}
}

func TestLimits(t *testing.T) {
	_, pod, _ := buildCase(t, "limits")
	step := findContainer(t, pod, podspec.StepContainerName)
	// 512 shares = half a CPU, requested, never a limit by default.
	if q := step.Resources.Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse("500m")) != 0 {
		t.Errorf("cpu request = %s, want 500m", q.String())
	}
	if q, ok := step.Resources.Limits[corev1.ResourceCPU]; ok {
		t.Errorf("cpu limit = %s, want none", q.String())
	}
	mem := resource.MustParse("1Gi")
	for what, list := range map[string]corev1.ResourceList{"requests": step.Resources.Requests, "limits": step.Resources.Limits} {
		if q := list[corev1.ResourceMemory]; q.Cmp(mem) != 0 {
			t.Errorf("memory %s = %s, want %s", what, q.String(), mem.String())
		}
	}
	if sc := step.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Error("privileged step is not privileged")
	}
	if sc := step.SecurityContext; sc != nil && sc.RunAsUser != nil {
		t.Error("runAsUser is set; the entrypoint switches user itself")
	}
	// 30m timeout + 15m allowance + 5m keep-alive.
	if d := pod.Spec.ActiveDeadlineSeconds; d == nil || *d != 3000 {
		t.Errorf("activeDeadlineSeconds = %v, want 3000", d)
	}
	if pod.Spec.DNSPolicy != corev1.DNSDefault {
		t.Errorf("dnsPolicy = %q", pod.Spec.DNSPolicy)
	}
}

// TestContainerLimits pins Concourse's container_limits semantics: cpu
// shares are a relative weight (a request, a limit only when the worker
// asks), memory is a limit (and request), 0 and unset mean unlimited.
func TestContainerLimits(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name           string
		limits         action.Limits
		hard           bool
		cpuReq, cpuLim string // "" = absent
		memReq, memLim string
	}{
		{name: "unset"},
		{name: "zero", limits: action.Limits{CPUShares: u(0), MemoryBytes: u(0)}},
		{name: "zero hard", limits: action.Limits{CPUShares: u(0), MemoryBytes: u(0)}, hard: true},
		{name: "one core", limits: action.Limits{CPUShares: u(1024)}, cpuReq: "1"},
		{name: "two cores", limits: action.Limits{CPUShares: u(2048)}, cpuReq: "2"},
		{name: "half", limits: action.Limits{CPUShares: u(512), MemoryBytes: u(256 << 20)}, cpuReq: "500m", memReq: "256Mi", memLim: "256Mi"},
		{name: "half hard", limits: action.Limits{CPUShares: u(512)}, hard: true, cpuReq: "500m", cpuLim: "500m"},
		{name: "100 shares", limits: action.Limits{CPUShares: u(100)}, cpuReq: "97m"},
		{name: "one share", limits: action.Limits{CPUShares: u(1)}, cpuReq: "1m"},
		{name: "memory only", limits: action.Limits{MemoryBytes: u(1 << 30)}, memReq: "1Gi", memLim: "1Gi"},
		{name: "memory, cpu 0", limits: action.Limits{CPUShares: u(0), MemoryBytes: u(1 << 30)}, memReq: "1Gi", memLim: "1Gi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := podspec.GoldenCases()[0]
			c.Action.Limits = tc.limits
			c.Worker.HardCPULimit = tc.hard
			pod, _, err := podspec.Build(c.Action, c.Worker, c.Secrets)
			if err != nil {
				t.Fatal(err)
			}
			r := findContainer(t, pod, podspec.StepContainerName).Resources
			check := func(what string, list corev1.ResourceList, name corev1.ResourceName, want string) {
				q, ok := list[name]
				switch {
				case want == "" && ok:
					t.Errorf("%s %s = %s, want none", name, what, q.String())
				case want != "" && !ok:
					t.Errorf("%s %s absent, want %s", name, what, want)
				case want != "" && q.Cmp(resource.MustParse(want)) != 0:
					t.Errorf("%s %s = %s, want %s", name, what, q.String(), want)
				}
			}
			check("request", r.Requests, corev1.ResourceCPU, tc.cpuReq)
			check("limit", r.Limits, corev1.ResourceCPU, tc.cpuLim)
			check("request", r.Requests, corev1.ResourceMemory, tc.memReq)
			check("limit", r.Limits, corev1.ResourceMemory, tc.memLim)
		})
	}
}

// TestSecurity checks each golden shape's least privilege: restricted for
// a numeric non-root run.user, baseline otherwise, privileged only when
// asked; porter's sidecar never root-writable nor escalating.
func TestSecurity(t *testing.T) {
	for _, c := range podspec.GoldenCases() {
		t.Run(c.Name, func(t *testing.T) {
			pod, _, err := podspec.Build(c.Action, c.Worker, c.Secrets)
			if err != nil {
				t.Fatal(err)
			}
			sidecar := findContainer(t, pod, podspec.SidecarContainerName)
			step := findContainer(t, pod, podspec.StepContainerName)
			if c.Worker.Platform == action.PlatformWindows {
				if pod.Spec.SecurityContext != nil || sidecar.SecurityContext != nil || step.SecurityContext != nil {
					t.Error("a Windows pod carries a Linux securityContext")
				}
				return
			}
			ps := pod.Spec.SecurityContext
			if ps == nil || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod seccompProfile = %+v, want RuntimeDefault", ps)
			}
			sc := sidecar.SecurityContext
			if sc == nil || !isTrue(sc.ReadOnlyRootFilesystem) || !isFalse(sc.AllowPrivilegeEscalation) ||
				sc.Capabilities == nil || strings.Join(capNames(sc.Capabilities.Drop), ",") != "ALL" {
				t.Fatalf("sidecar securityContext = %+v", sc)
			}
			if mountAt(sidecar, "/tmp") == "" {
				t.Error("sidecar with a read-only root filesystem has no /tmp volume")
			}
			uid, gid, restricted := podspec.NonRootUser(c.Action.Run.User)
			switch {
			case c.Action.Privileged:
				if !isTrue(step.SecurityContext.Privileged) {
					t.Error("privileged step is not privileged")
				}
			case restricted:
				if !isTrue(ps.RunAsNonRoot) || ps.RunAsUser == nil || *ps.RunAsUser != uid || ps.RunAsGroup == nil || *ps.RunAsGroup != gid {
					t.Errorf("pod securityContext = %+v, want non-root %d:%d", ps, uid, gid)
				}
				if len(sc.Capabilities.Add) > 0 {
					t.Errorf("restricted sidecar adds capabilities %v", sc.Capabilities.Add)
				}
				if s := step.SecurityContext; s == nil || !isFalse(s.AllowPrivilegeEscalation) || s.Capabilities == nil || strings.Join(capNames(s.Capabilities.Drop), ",") != "ALL" {
					t.Errorf("restricted step securityContext = %+v", s)
				}
			default:
				if ps.RunAsNonRoot != nil || ps.RunAsUser != nil {
					t.Errorf("a step of the image's user runs as %+v", ps)
				}
				if got := strings.Join(capNames(sc.Capabilities.Add), ","); got != "CHOWN,DAC_OVERRIDE,FOWNER,FSETID" {
					t.Errorf("root sidecar adds %s", got)
				}
				if s := step.SecurityContext; s == nil || !isFalse(s.AllowPrivilegeEscalation) || s.Privileged != nil ||
					s.Capabilities == nil || strings.Join(capNames(s.Capabilities.Drop), ",") != "NET_RAW" {
					t.Errorf("step securityContext = %+v, want NET_RAW dropped", s)
				}
			}
		})
	}
}

// TestPrivilegedNeedsAllowingWorker: a privileged step is refused, naming
// the worker and the setting, unless the worker allows privileged steps.
func TestPrivilegedNeedsAllowingWorker(t *testing.T) {
	for _, c := range podspec.GoldenCases() {
		if c.Name != "minimal" {
			continue
		}
		c.Action.Privileged = true
		_, _, err := podspec.Build(c.Action, c.Worker, c.Secrets)
		if err == nil || !strings.Contains(err.Error(), `worker "kind-default" does not allow privileged steps`) ||
			!strings.Contains(err.Error(), "privileged: allow") {
			t.Errorf("privileged step on a worker that does not allow it: err = %v", err)
		}
		c.Worker.AllowPrivileged = true
		pod, _, err := podspec.Build(c.Action, c.Worker, c.Secrets)
		if err != nil {
			t.Fatalf("privileged step on a worker that allows it: %v", err)
		}
		if sc := findContainer(t, pod, podspec.StepContainerName).SecurityContext; sc == nil || !isTrue(sc.Privileged) {
			t.Errorf("step securityContext = %+v, want privileged", sc)
		}
	}
}

func TestNonRootUser(t *testing.T) {
	for spec, want := range map[string][3]int64{
		"1000": {1000, 1000, 1}, "1000:100": {1000, 100, 1}, "65532:0": {65532, 0, 1},
		"": {0, 0, 0}, "0": {0, 0, 0}, "0:1000": {0, 0, 0}, "root": {0, 0, 0}, "nobody": {0, 0, 0},
		"1000:staff": {0, 0, 0}, "-1": {0, 0, 0}, "99999999999": {0, 0, 0},
	} {
		uid, gid, ok := podspec.NonRootUser(spec)
		if got := [3]int64{uid, gid, map[bool]int64{true: 1}[ok]}; got != want {
			t.Errorf("NonRootUser(%q) = %v, want %v", spec, got, want)
		}
	}
}

func TestStepStorage(t *testing.T) {
	c, pod, _ := buildCase(t, "restricted")
	for _, v := range pod.Spec.Volumes {
		want := c.Worker.VolumeSizeLimit.DeepCopy()
		if v.Name == "porter" {
			want.Add(resource.MustParse("256Mi")) // room for the porter binary
		}
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Cmp(want) != 0 {
			t.Errorf("volume %s: emptyDir %+v, want sizeLimit %s", v.Name, v.EmptyDir, want.String())
		}
	}
	r := findContainer(t, pod, podspec.StepContainerName).Resources
	if q := r.Requests[corev1.ResourceEphemeralStorage]; q.Cmp(resource.MustParse("100Mi")) != 0 {
		t.Errorf("ephemeral-storage request = %s", q.String())
	}
	if q := r.Limits[corev1.ResourceEphemeralStorage]; q.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("ephemeral-storage limit = %s", q.String())
	}
	_, plain, _ := buildCase(t, "minimal")
	for _, v := range plain.Spec.Volumes {
		if v.EmptyDir.SizeLimit != nil {
			t.Errorf("volume %s has a sizeLimit the worker did not set", v.Name)
		}
	}

	c.Worker.EphemeralStorageRequest = ptrQ("3Gi")
	c.Worker.VolumeSizeLimit = ptrQ("0")
	_, _, err := podspec.Build(c.Action, c.Worker, c.Secrets)
	for _, want := range []string{"request 3Gi is above its limit 2Gi", "step volume size limit 0 is not positive"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Build error = %v, want it to say %q", err, want)
		}
	}
}

func ptrQ(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

func isTrue(b *bool) bool  { return b != nil && *b }
func isFalse(b *bool) bool { return b != nil && !*b }

func capNames(cs []corev1.Capability) []string {
	var out []string
	for _, c := range cs {
		out = append(out, string(c))
	}
	return out
}

func TestResourceStepPullPolicy(t *testing.T) {
	_, pod, _ := buildCase(t, "get")
	if p := findContainer(t, pod, podspec.StepContainerName).ImagePullPolicy; p != corev1.PullIfNotPresent {
		t.Errorf("step container's pull policy = %q, want the action's IfNotPresent", p)
	}
	if p := findContainer(t, pod, podspec.SidecarContainerName).ImagePullPolicy; p != corev1.PullAlways {
		t.Errorf("sidecar's pull policy = %q, want the worker's Always", p)
	}
}

func TestActiveDeadlineDefaultAllowance(t *testing.T) {
	c := podspec.GoldenCases()[0]
	c.Action.Timeout = action.Duration{Duration: 90 * time.Second}
	pod, _, err := podspec.Build(c.Action, c.Worker, c.Secrets)
	if err != nil {
		t.Fatal(err)
	}
	want := int64((90*time.Second + podspec.DefaultUploadAllowance) / time.Second)
	if d := pod.Spec.ActiveDeadlineSeconds; d == nil || *d != want {
		t.Errorf("activeDeadlineSeconds = %v, want %d", d, want)
	}
}

func TestValidation(t *testing.T) {
	c := podspec.GoldenCases()[0]
	c.Action.StepID = ""
	c.Action.SecretParams = []string{"TOKEN", "PORTER_SOCKET"}
	c.Action.Params = map[string]string{"A=B": "x"}
	c.Worker.Namespace = ""
	c.Worker.PorterImage = ""
	c.Worker.ATCAddress = ""
	c.Secrets.StepToken = ""
	c.Secrets.Params = map[string]string{"PORTER_SOCKET": "x", "OTHER": "y"}
	_, _, err := podspec.Build(c.Action, c.Worker, c.Secrets)
	if err == nil {
		t.Fatal("Build accepted an invalid step")
	}
	for _, want := range []string{
		"step_id is empty",
		"worker namespace is empty",
		"worker porter image is empty",
		"worker ATC address is empty",
		"step token is empty",
		`secret param "TOKEN" has no value`,
		`"OTHER", which is not one of the action's secret params`,
		`param name "A=B" is invalid`,
		`param name "PORTER_SOCKET" is reserved`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}

	c = podspec.GoldenCases()[0]
	c.Worker.Namespace = "Not_A_Namespace"
	if _, _, err := podspec.Build(c.Action, c.Worker, c.Secrets); err == nil || !strings.Contains(err.Error(), "worker namespace") {
		t.Errorf("bad namespace: err = %v", err)
	}

	if _, _, err := podspec.Build(nil, c.Worker, c.Secrets); err == nil {
		t.Error("Build accepted a nil action")
	}
}

func TestName(t *testing.T) {
	if got := podspec.Name("b42-s3"); got != "porter-b42-s3" {
		t.Errorf("Name = %q", got)
	}
	long := strings.Repeat("a", 100)
	n1, n2 := podspec.Name(long), podspec.Name(long+"b")
	for _, n := range []string{n1, n2, podspec.Name("Upper_Case.Step"), podspec.Name("---")} {
		if msgs := validation.IsDNS1123Label(n); len(msgs) > 0 {
			t.Errorf("Name gave %q: %v", n, msgs)
		}
	}
	if n1 == n2 {
		t.Errorf("two long step IDs share the name %q", n1)
	}
	if podspec.Name("Step") == podspec.Name("step") {
		t.Error("step IDs differing in case share a name")
	}
}

func TestLabelValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"main", "main"},
		{"my-team_1.x", "my-team_1.x"},
		{"", ""},
	} {
		if got := podspec.LabelValue(tc.in); got != tc.want {
			t.Errorf("LabelValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	seen := map[string]string{}
	for _, in := range []string{"My Team", "My-Team", "team/with/slashes", "-leading", "trailing.", "ünïcødé", "!!!", strings.Repeat("x", 63), strings.Repeat("x", 64), strings.Repeat("x", 200)} {
		got := podspec.LabelValue(in)
		if msgs := content.IsLabelValue(got); len(msgs) > 0 {
			t.Errorf("LabelValue(%q) = %q: %v", in, got, msgs)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("LabelValue(%q) = LabelValue(%q) = %q", in, other, got)
		}
		seen[got] = in
	}
}

func TestSelectors(t *testing.T) {
	c, pod, _ := buildCase(t, "minimal")
	podLabels := labels.Set(pod.Labels)
	for name, sel := range map[string]string{
		"worker": podspec.WorkerSelector(c.Worker.Name),
		"build":  podspec.BuildSelector(c.Worker.Name, c.Action.Build.ID),
		"step":   podspec.StepSelector(c.Worker.Name, c.Action.StepID),
	} {
		s, err := labels.Parse(sel)
		if err != nil {
			t.Fatalf("%s selector %q: %v", name, sel, err)
		}
		if !s.Matches(podLabels) {
			t.Errorf("%s selector %q does not match the pod's labels %v", name, sel, pod.Labels)
		}
	}
	other, _ := labels.Parse(podspec.StepSelector(c.Worker.Name, "other-step"))
	if other.Matches(podLabels) {
		t.Error("another step's selector matches the pod")
	}
	otherWorker, _ := labels.Parse(podspec.WorkerSelector("other-worker"))
	if otherWorker.Matches(podLabels) {
		t.Error("another worker's selector matches the pod")
	}
}

func TestOwnedBy(t *testing.T) {
	_, pod, secret := buildCase(t, "minimal")
	if err := podspec.OwnedBy(secret, pod); err == nil {
		t.Error("OwnedBy accepted a pod without a UID")
	}
	if _, err := podspec.OwnerPatch(pod); err == nil {
		t.Error("OwnerPatch accepted a pod without a UID")
	}
	pod.UID = types.UID("0b6c4f6e-1111-2222-3333-444455556666")
	if err := podspec.OwnedBy(secret, pod); err != nil {
		t.Fatal(err)
	}
	if len(secret.OwnerReferences) != 1 {
		t.Fatalf("owner references = %v", secret.OwnerReferences)
	}
	ref := secret.OwnerReferences[0]
	if ref.Kind != "Pod" || ref.APIVersion != "v1" || ref.Name != pod.Name || ref.UID != pod.UID {
		t.Errorf("owner reference = %+v", ref)
	}
	patch, err := podspec.OwnerPatch(pod)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"porter-minimal","uid":"0b6c4f6e-1111-2222-3333-444455556666"}]}}`
	if string(patch) != want {
		t.Errorf("patch = %s, want %s", patch, want)
	}
}

func findContainer(t *testing.T, pod *corev1.Pod, name string) corev1.Container {
	t.Helper()
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("pod has no container %q", name)
	return corev1.Container{}
}

func containerNames(cs []corev1.Container) string {
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return strings.Join(names, ",")
}

func findEnv(t *testing.T, c corev1.Container, name string) corev1.EnvVar {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("%s has no env %s", c.Name, name)
	return corev1.EnvVar{}
}

func hasEnv(c corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return true
		}
	}
	return false
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func mountAt(c corev1.Container, path string) string {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m.Name
		}
	}
	return ""
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func TestPullSecret(t *testing.T) {
	c, pod, _ := buildCase(t, "private-image")
	pull, err := podspec.PullSecret(c.Action, c.Worker, *c.Secrets.ImagePull)
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != pull.Name {
		t.Errorf("pod's imagePullSecrets = %v, want the pull Secret %q", pod.Spec.ImagePullSecrets, pull.Name)
	}
	if pull.Name == pod.Name || pull.Namespace != pod.Namespace {
		t.Errorf("pull Secret %s/%s next to pod %s/%s: want its own name in the pod's namespace", pull.Namespace, pull.Name, pod.Namespace, pod.Name)
	}
	if msgs := validation.IsDNS1123Subdomain(pull.Name); len(msgs) > 0 {
		t.Errorf("pull Secret name %q: %v", pull.Name, msgs)
	}
	if pull.Type != corev1.SecretTypeDockerConfigJson {
		t.Errorf("type = %q, want %q", pull.Type, corev1.SecretTypeDockerConfigJson)
	}
	// Pod and Secrets carry the same labels: the worker's and the step's
	// selectors find the pull Secret too.
	for k, v := range pod.Labels {
		if pull.Labels[k] != v {
			t.Errorf("pull Secret label %s=%q, pod has %q", k, pull.Labels[k], v)
		}
	}
	var config struct {
		Auths map[string]struct{ Username, Password, Auth string } `json:"auths"`
	}
	if err := json.Unmarshal(pull.Data[corev1.DockerConfigJsonKey], &config); err != nil {
		t.Fatalf("%s: %v", corev1.DockerConfigJsonKey, err)
	}
	entry, ok := config.Auths["registry.example.com"]
	if !ok || len(config.Auths) != 1 {
		t.Fatalf("auths = %v, want one entry for registry.example.com", config.Auths)
	}
	if entry.Username != "robot" || entry.Password != "secret-registry-password" || entry.Auth != base64.StdEncoding.EncodeToString([]byte("robot:secret-registry-password")) {
		t.Errorf("auth entry = %+v", entry)
	}

	// No credentials, no pull Secret.
	_, plain, _ := buildCase(t, "minimal")
	if len(plain.Spec.ImagePullSecrets) != 0 {
		t.Errorf("minimal pod names pull Secrets %v", plain.Spec.ImagePullSecrets)
	}
}

func TestPullSecretRegistry(t *testing.T) {
	const digest = "@sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	for image, want := range map[string]string{
		"busybox" + digest:                      "https://index.docker.io/v1/",
		"library/busybox" + digest:              "https://index.docker.io/v1/",
		"myorg/app" + digest:                    "https://index.docker.io/v1/",
		"docker.io/myorg/app" + digest:          "https://index.docker.io/v1/",
		"index.docker.io/library/busybox:1.36":  "https://index.docker.io/v1/",
		"10.245.0.1:5000/private/app" + digest:  "10.245.0.1:5000",
		"localhost/app" + digest:                "localhost",
		"ghcr.io/porter-ci/porter" + digest:     "ghcr.io",
		"registry.example.com:443/a/b/c:latest": "registry.example.com:443",
	} {
		a := &action.Action{StepID: "s", Image: image}
		pull, err := podspec.PullSecret(a, podspec.Worker{Name: "w", Namespace: "ns"}, podspec.RegistryAuth{Username: "u", Password: "p"})
		if err != nil {
			t.Errorf("%s: %v", image, err)
			continue
		}
		var config struct {
			Auths map[string]any `json:"auths"`
		}
		_ = json.Unmarshal(pull.Data[corev1.DockerConfigJsonKey], &config)
		if _, ok := config.Auths[want]; !ok || len(config.Auths) != 1 {
			t.Errorf("%s: auths for %v, want %q", image, config.Auths, want)
		}
	}
	if _, err := podspec.PullSecret(&action.Action{StepID: "s", Image: "busybox"}, podspec.Worker{Namespace: "ns"}, podspec.RegistryAuth{Username: "u"}); err == nil {
		t.Error("PullSecret without a password succeeded")
	}
}
