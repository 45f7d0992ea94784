package podspec_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/podspec"
)

func caseNamed(t *testing.T, name string) podspec.Case {
	t.Helper()
	for _, c := range podspec.GoldenCases() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no golden case %q", name)
	return podspec.Case{}
}

func TestPlacementAndPlatformErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		base   string
		modify func(*podspec.Case)
		want   []string
	}{
		{
			name: "two tags select different values of one node label",
			base: "tags-placement",
			modify: func(c *podspec.Case) {
				c.Worker.TagPlacement["eu"] = podspec.Placement{NodeSelector: map[string]string{"porter.dev/pool": "general"}}
			},
			want: []string{`tag "gpu" and tag "eu"`, "porter.dev/pool", `"gpu", "general"`},
		},
		{
			name: "a tag selects linux nodes on a windows worker",
			base: "windows",
			modify: func(c *podspec.Case) {
				c.Worker.TagPlacement["ltsc2022"] = podspec.Placement{NodeSelector: map[string]string{podspec.LabelOS: "linux"}}
			},
			want: []string{`platform windows and tag "ltsc2022"`, podspec.LabelOS},
		},
		{
			name:   "linux step on a windows worker",
			base:   "windows",
			modify: func(c *podspec.Case) { c.Action.Platform = "" },
			want:   []string{`a linux step cannot run on worker "kind-default", whose platform is windows`},
		},
		{
			name:   "windows step on a linux worker",
			base:   "minimal",
			modify: func(c *podspec.Case) { c.Action.Platform = action.PlatformWindows },
			want:   []string{`a windows step cannot run on worker "kind-default", whose platform is linux`},
		},
		{
			name: "windows step on an explicitly linux worker",
			base: "minimal",
			modify: func(c *podspec.Case) {
				c.Action.Platform, c.Worker.Platform = action.PlatformWindows, action.PlatformLinux
			},
			want: []string{"a windows step cannot run", "whose platform is linux"},
		},
		{
			name:   "windows worker without a windows porter image",
			base:   "windows",
			modify: func(c *podspec.Case) { c.Worker.WindowsPorterImage = "" },
			want:   []string{"has no windows porter image"},
		},
		{
			name: "linux-only step settings on a windows worker",
			base: "windows",
			modify: func(c *podspec.Case) {
				c.Action.Privileged = true
				c.Action.Run.User = "1000"
			},
			want: []string{"privileged steps are linux-only", `run.user "1000" is not supported on windows`},
		},
		{
			name:   "unknown worker platform",
			base:   "minimal",
			modify: func(c *podspec.Case) { c.Worker.Platform = "darwin" },
			want:   []string{`worker platform "darwin"`},
		},
		{
			name:   "unknown step platform",
			base:   "minimal",
			modify: func(c *podspec.Case) { c.Action.Platform = "darwin" },
			want:   []string{`platform "darwin": want linux or windows`},
		},
		{
			name: "invalid tag placement and pull secret names",
			base: "tags-placement",
			modify: func(c *podspec.Case) {
				c.Worker.TagPlacement["eu"] = podspec.Placement{NodeSelector: map[string]string{"bad key!": "x", "ok": "bad value!"}}
				c.Worker.ImagePullSecrets = []string{"Not_A_Secret"}
			},
			want: []string{`node label "bad key!" is invalid`, `node label value "bad value!" is invalid`, `image pull secret "Not_A_Secret" is invalid`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := caseNamed(t, tc.base)
			if _, _, err := podspec.Build(c.Action, c.Worker, c.Secrets); err != nil {
				t.Fatalf("the unmodified case %s fails: %v", tc.base, err)
			}
			tc.modify(&c)
			pod, _, err := podspec.Build(c.Action, c.Worker, c.Secrets)
			if err == nil {
				t.Fatalf("Build accepted it: node selector %v", pod.Spec.NodeSelector)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q:\n%v", want, err)
				}
			}
		})
	}
}

func TestTagPlacementMerge(t *testing.T) {
	c := caseNamed(t, "tags-placement")
	gpu := c.Worker.TagPlacement["gpu"].Tolerations[0]
	// A tag asked for twice, a tag without placement, the same selector
	// value and the same toleration from two tags: all merge to one.
	c.Action.Tags = []string{"eu", "gpu", "eu", "no-placement", ""}
	c.Worker.TagPlacement["eu"] = podspec.Placement{
		NodeSelector: map[string]string{"topology.kubernetes.io/region": "eu-west-1", "porter.dev/pool": "gpu"},
		Tolerations:  append(c.Worker.TagPlacement["eu"].Tolerations, gpu),
	}
	c.Worker.ImagePullSecrets = []string{"registry-mirror", "registry-mirror"}
	pod, _, err := podspec.Build(c.Action, c.Worker, c.Secrets)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"topology.kubernetes.io/region": "eu-west-1", "porter.dev/pool": "gpu", "nvidia.com/gpu.present": "true"}
	if !mapsEqual(pod.Spec.NodeSelector, want) {
		t.Errorf("nodeSelector = %v, want %v (arm's arch selector was not asked for)", pod.Spec.NodeSelector, want)
	}
	var keys []string
	for _, tol := range pod.Spec.Tolerations {
		keys = append(keys, tol.Key)
	}
	if !slices.Equal(keys, []string{"dedicated", "nvidia.com/gpu"}) {
		t.Errorf("tolerations by key = %v, want [dedicated nvidia.com/gpu]: in the step's tag order, once each", keys)
	}
	var pulls []string
	for _, ref := range pod.Spec.ImagePullSecrets {
		pulls = append(pulls, ref.Name)
	}
	if want := []string{podspec.PullSecretName(c.Action.StepID), "registry-mirror"}; !slices.Equal(pulls, want) {
		t.Errorf("imagePullSecrets = %v, want %v", pulls, want)
	}

	// Without tags, a worker's tag placement adds nothing; its pull
	// Secrets apply to every step.
	c = caseNamed(t, "tags-placement")
	c.Action.Tags = nil
	c.Secrets.ImagePull = nil
	pod, _, err = podspec.Build(c.Action, c.Worker, c.Secrets)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeSelector != nil || pod.Spec.Tolerations != nil {
		t.Errorf("untagged step: nodeSelector %v, tolerations %v; want none", pod.Spec.NodeSelector, pod.Spec.Tolerations)
	}
	if len(pod.Spec.ImagePullSecrets) != 2 || pod.Spec.ImagePullSecrets[0].Name != "registry-mirror" {
		t.Errorf("untagged step: imagePullSecrets = %v, want the worker's two", pod.Spec.ImagePullSecrets)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestWindowsShape checks what the API server's os.name=windows validation
// does not: porter's own paths and binaries. The dry-run spec in
// test/runtime proves the API server accepts the shape.
func TestWindowsShape(t *testing.T) {
	for _, name := range []string{"windows", "windows-get"} {
		t.Run(name, func(t *testing.T) {
			c := caseNamed(t, name)
			pod, _, err := podspec.Build(c.Action, c.Worker, c.Secrets)
			if err != nil {
				t.Fatal(err)
			}
			spec := pod.Spec
			if spec.OS == nil || spec.OS.Name != corev1.Windows {
				t.Errorf("spec.os = %v, want windows", spec.OS)
			}
			if spec.NodeSelector[podspec.LabelOS] != "windows" {
				t.Errorf("nodeSelector = %v, want %s: windows", spec.NodeSelector, podspec.LabelOS)
			}
			if spec.SecurityContext != nil {
				t.Errorf("pod securityContext = %+v, want none", spec.SecurityContext)
			}
			for _, v := range spec.Volumes {
				if v.Secret != nil && v.Secret.DefaultMode != nil {
					t.Errorf("volume %s has a Linux file mode", v.Name)
				}
			}
			sidecar := findContainer(t, pod, podspec.SidecarContainerName)
			step := findContainer(t, pod, podspec.StepContainerName)
			if sidecar.Image != c.Worker.WindowsPorterImage {
				t.Errorf("sidecar image = %q, want the windows porter image %q", sidecar.Image, c.Worker.WindowsPorterImage)
			}
			if got := strings.Join(sidecar.Lifecycle.PostStart.Exec.Command, " "); got != podspec.WindowsPorterImageBinary+" install "+podspec.WindowsPorterBinDir {
				t.Errorf("install hook = %q", got)
			}
			if got := step.Command[0]; got != podspec.WindowsPorterBinDir+`\porter.exe` {
				t.Errorf("step runs %q, want the installed porter.exe", got)
			}
			for _, ctr := range []corev1.Container{sidecar, step} {
				if ctr.SecurityContext != nil {
					t.Errorf("%s has securityContext %+v, want none", ctr.Name, ctr.SecurityContext)
				}
				if envValue(ctr, podspec.EnvSocket) != podspec.WindowsSocketPath {
					t.Errorf("%s: %s = %q", ctr.Name, podspec.EnvSocket, envValue(ctr, podspec.EnvSocket))
				}
				for _, m := range ctr.VolumeMounts {
					if !strings.HasPrefix(m.MountPath, `C:\`) || strings.Contains(m.MountPath, "/") {
						t.Errorf("%s mounts %s at %q, want a C:\\ path", ctr.Name, m.Name, m.MountPath)
					}
				}
			}
			if mountAt(step, `C:\tmp\build`+strings.ReplaceAll(strings.TrimPrefix(c.Action.WorkDir, "/tmp/build"), "/", `\`)) == "" || step.WorkingDir != mountPathOf(step, "workdir") {
				t.Errorf("step workingDir %q is not its work directory mount", step.WorkingDir)
			}
		})
	}
	// The Linux shape names no OS: it stays as it was for clusters of
	// Linux nodes only.
	_, pod, _ := buildCase(t, "minimal")
	if pod.Spec.OS != nil || pod.Spec.NodeSelector != nil {
		t.Errorf("linux pod: os %v, nodeSelector %v; want neither", pod.Spec.OS, pod.Spec.NodeSelector)
	}
}

func mountPathOf(c corev1.Container, volume string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}

func TestWorkerValidate(t *testing.T) {
	for _, c := range podspec.GoldenCases() {
		if err := c.Worker.Validate(); err != nil {
			t.Errorf("%s: worker of a golden case: %v", c.Name, err)
		}
	}
	w := caseNamed(t, "windows").Worker
	w.WindowsPorterImage = ""
	w.TagPlacement["ltsc2022"] = podspec.Placement{NodeSelector: map[string]string{"bad key!": "x"}}
	err := w.Validate()
	if err == nil {
		t.Fatal("Validate accepted a windows worker without a windows porter image")
	}
	for _, want := range []string{`worker "kind-default"`, "no windows porter image", `node label "bad key!" is invalid`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	w = caseNamed(t, "minimal").Worker
	w.Platform = "darwin"
	if err := w.Validate(); err == nil || !strings.Contains(err.Error(), `worker platform "darwin"`) {
		t.Errorf("unknown platform: err = %v", err)
	}
}
