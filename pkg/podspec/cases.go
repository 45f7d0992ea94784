package podspec

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/porter-ci/porter/pkg/action"
)

// Case is one named input of Build. GoldenCases lists the shapes the golden
// files pin down; the e2e suite sends each to a real API server (server-side
// dry run) to prove the API accepts them.
type Case struct {
	Name    string
	Action  *action.Action
	Worker  Worker
	Secrets Secrets
}

// GoldenCases returns fresh copies of the golden cases on every call, so a
// caller may modify them.
func GoldenCases() []Case {
	return []Case{
		{
			Name:    "minimal",
			Action:  exampleAction("minimal"),
			Worker:  exampleWorker(),
			Secrets: exampleSecrets(),
		},
		{
			Name: "artifacts",
			Action: func() *action.Action {
				a := exampleAction("artifacts")
				a.Image = "registry.example.com/tools/builder@sha256:" + fakeDigest
				a.Run = action.Run{Path: "sh", Args: []string{"-exc", "cp -r repo/. built/ && make -C built"}, Dir: "repo"}
				a.Inputs = []action.Input{
					{Name: "repo", Path: "repo", Key: "artifacts/" + fakeDigest + ".tar.zst", Digest: "sha256:" + fakeDigest},
					{Name: "version", Path: "version", Key: "artifacts/" + otherDigest + ".tar.zst", Digest: "sha256:" + otherDigest},
					{Name: "extra", Path: "extra", Optional: true},
				}
				a.Outputs = []action.Output{
					{Name: "built", Path: "built"},
					// Modifies the input of the same path.
					{Name: "version", Path: "version"},
				}
				a.Caches = []action.Cache{
					{Path: "repo/.cache/go-build", Key: "task-caches/main/porter/unit/test/repo/.cache/go-build.tar.zst"},
				}
				return a
			}(),
			Worker:  exampleWorker(),
			Secrets: exampleSecrets(),
		},
		{
			Name: "params",
			Action: func() *action.Action {
				a := exampleAction("params")
				a.Run = action.Run{Path: "sh", Args: []string{"-c", `echo "deploying $APP to $REGION"`}}
				a.Params = map[string]string{"REGION": "eu-west-1", "APP": "porter", "EMPTY": ""}
				a.SecretParams = []string{"DEPLOY_TOKEN", "AWS_SECRET_ACCESS_KEY"}
				return a
			}(),
			Worker: exampleWorker(),
			Secrets: func() Secrets {
				s := exampleSecrets()
				s.Params = map[string]string{
					"DEPLOY_TOKEN":          "secret-deploy-token-value",
					"AWS_SECRET_ACCESS_KEY": "secret-aws-key-value",
				}
				return s
			}(),
		},
		{
			Name: "limits",
			Action: func() *action.Action {
				a := exampleAction("limits")
				a.Run = action.Run{Path: "/bin/sh", Args: []string{"-c", "id && ulimit -a"}, User: "nobody"}
				a.Limits = action.Limits{CPUShares: ptr(uint64(512)), MemoryBytes: ptr(uint64(1 << 30))}
				a.Privileged = true
				a.Timeout = action.Duration{Duration: 30 * time.Minute}
				a.KeepAlive = action.Duration{Duration: 5 * time.Minute}
				return a
			}(),
			Worker: func() Worker {
				w := exampleWorker()
				w.AllowPrivileged = true // its workers config says `privileged: allow`
				w.ImagePullPolicy = corev1.PullIfNotPresent
				w.DNSPolicy = corev1.DNSDefault
				w.UploadAllowance = 15 * time.Minute
				return w
			}(),
			Secrets: exampleSecrets(),
		},
		{
			// A task running as a numeric non-root uid: the pod passes the
			// restricted Pod Security Standard. Shares are a CPU request
			// only; the worker bounds its volumes and ephemeral storage.
			Name: "restricted",
			Action: func() *action.Action {
				a := exampleAction("restricted")
				a.Run = action.Run{Path: "sh", Args: []string{"-c", "id"}, User: "1000:1000"}
				a.Limits = action.Limits{CPUShares: ptr(uint64(512)), MemoryBytes: ptr(uint64(256 << 20))}
				a.Inputs = []action.Input{{Name: "repo", Path: "repo", Key: "artifacts/" + fakeDigest + ".tar.zst", Digest: "sha256:" + fakeDigest}}
				a.Outputs = []action.Output{{Name: "built", Path: "built"}}
				return a
			}(),
			Worker: func() Worker {
				w := exampleWorker()
				w.VolumeSizeLimit = ptr(resource.MustParse("1Gi"))
				w.EphemeralStorageRequest = ptr(resource.MustParse("100Mi"))
				w.EphemeralStorageLimit = ptr(resource.MustParse("2Gi"))
				w.MaxExtractBytes, w.MaxExtractFiles = 1<<30, 100_000
				return w
			}(),
			Secrets: exampleSecrets(),
		},
		{
			// cpu: 0 and memory: 0 mean unlimited, as in Concourse; the
			// worker asks for hard CPU limits, which 0 shares do not get.
			Name: "unlimited",
			Action: func() *action.Action {
				a := exampleAction("unlimited")
				a.Limits = action.Limits{CPUShares: ptr(uint64(0)), MemoryBytes: ptr(uint64(0))}
				return a
			}(),
			Worker: func() Worker {
				w := exampleWorker()
				w.HardCPULimit = true
				return w
			}(),
			Secrets: exampleSecrets(),
		},
		{
			// A resource step: the request on stdin, the type's image
			// pulled once whatever the worker's policy.
			Name: "get",
			Action: func() *action.Action {
				a := exampleAction("get")
				a.Type, a.StepName = action.KindGet, "repo"
				a.Image, a.ImagePullPolicy = "porter.local/resource-git:dev", string(corev1.PullIfNotPresent)
				a.WorkDir = "/tmp/build"
				a.Run = action.Run{Path: "/opt/resource/in", Args: []string{"/tmp/build/get"}}
				a.Outputs = []action.Output{{Name: "repo", Path: "get"}}
				a.Params = map[string]string{"BUILD_ID": "42", "BUILD_NAME": "7", "BUILD_TEAM_NAME": "main"}
				a.StdinSecret = true
				return a
			}(),
			Worker: func() Worker {
				w := exampleWorker()
				w.ImagePullPolicy = corev1.PullAlways
				return w
			}(),
			Secrets: func() Secrets {
				s := exampleSecrets()
				s.Stdin = []byte(`{"source":{"uri":"https://example.com/repo.git","private_key":"secret-key"},"version":{"ref":"abc"},"params":{}}`)
				return s
			}(),
		},
		{
			// A task whose image comes from a private registry: the pod
			// names its pull Secret (PullSecret), which holds the login.
			Name: "private-image",
			Action: func() *action.Action {
				a := exampleAction("private-image")
				a.Image = "registry.example.com/team/app@sha256:" + fakeDigest
				return a
			}(),
			Worker: exampleWorker(),
			Secrets: func() Secrets {
				s := exampleSecrets()
				s.ImagePull = &RegistryAuth{Username: "robot", Password: "secret-registry-password"}
				return s
			}(),
		},
		{
			Name:   "fallback-sidecar",
			Action: exampleAction("fallback-sidecar"),
			Worker: func() Worker {
				w := exampleWorker()
				w.NativeSidecars = false
				// No static blobstore credentials: the sidecar uses the
				// ambient ones, and the Secret holds only the step token.
				w.BlobstoreSecure = false
				w.ATCServerName = ""
				return w
			}(),
			Secrets: Secrets{StepToken: "secret-step-token"},
		},
		{
			// Two tags, each with its node selector and tolerations, and
			// a worker tag the step did not ask for, which adds nothing.
			// The worker's pull Secrets follow the step's own.
			Name: "tags-placement",
			Action: func() *action.Action {
				a := exampleAction("tags-placement")
				a.Image = "registry.example.com/team/cuda@sha256:" + fakeDigest
				a.Tags = []string{"gpu", "eu"}
				return a
			}(),
			Worker: func() Worker {
				w := exampleWorker()
				w.TagPlacement = map[string]Placement{
					"gpu": {
						NodeSelector: map[string]string{"porter.dev/pool": "gpu", "nvidia.com/gpu.present": "true"},
						Tolerations:  []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					},
					"eu": {
						NodeSelector: map[string]string{"topology.kubernetes.io/region": "eu-west-1"},
						Tolerations: []corev1.Toleration{{
							Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "eu",
							Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300)),
						}},
					},
					"arm": {NodeSelector: map[string]string{"kubernetes.io/arch": "arm64"}},
				}
				w.ImagePullSecrets = []string{"registry-mirror", "team-registry"}
				return w
			}(),
			Secrets: func() Secrets {
				s := exampleSecrets()
				s.ImagePull = &RegistryAuth{Username: "robot", Password: "secret-registry-password"}
				return s
			}(),
		},
		{
			// A Windows task with artifacts, limits and a tag: Windows
			// nodes, the Windows porter image and C:\ paths, no Linux-only
			// field.
			Name: "windows",
			Action: func() *action.Action {
				a := exampleAction("windows")
				a.Platform = action.PlatformWindows
				a.Image = "mcr.microsoft.com/windows/nanoserver:ltsc2022"
				a.Run = action.Run{Path: "cmd.exe", Args: []string{"/c", "copy repo\\README.md built\\ && echo %APP%"}, Dir: "repo"}
				a.Params = map[string]string{"APP": "porter"}
				a.Inputs = []action.Input{{Name: "repo", Path: "repo", Key: "artifacts/" + fakeDigest + ".tar.zst", Digest: "sha256:" + fakeDigest}}
				a.Outputs = []action.Output{{Name: "built", Path: "built"}}
				a.Caches = []action.Cache{{Path: "repo/.cache", Key: "task-caches/main/porter/windows/repo/.cache.tar.zst"}}
				a.Limits = action.Limits{CPUShares: ptr(uint64(1024)), MemoryBytes: ptr(uint64(2 << 30))}
				a.Timeout = action.Duration{Duration: 20 * time.Minute}
				a.Tags = []string{"ltsc2022"}
				return a
			}(),
			Worker: func() Worker {
				w := exampleWorker()
				w.Platform = action.PlatformWindows
				w.WindowsPorterImage = "ghcr.io/porter-ci/porter:v0.1.0-windows-ltsc2022"
				w.TagPlacement = map[string]Placement{"ltsc2022": {
					NodeSelector: map[string]string{"node.kubernetes.io/windows-build": "10.0.20348"},
					Tolerations:  []corev1.Toleration{{Key: "os", Operator: corev1.TolerationOpEqual, Value: "windows", Effect: corev1.TaintEffectNoSchedule}},
				}}
				return w
			}(),
			Secrets: exampleSecrets(),
		},
		{
			// A resource step on a Windows worker: the request arrives
			// through the Secret volume, without Linux file modes.
			Name: "windows-get",
			Action: func() *action.Action {
				a := exampleAction("windows-get")
				a.Type, a.StepName, a.Platform = action.KindGet, "repo", action.PlatformWindows
				a.Image, a.ImagePullPolicy = "registry.example.com/resource-git:windows", string(corev1.PullIfNotPresent)
				a.WorkDir = "/tmp/build"
				a.Run = action.Run{Path: "C:\\opt\\resource\\in.exe", Args: []string{"/tmp/build/get"}}
				a.Outputs = []action.Output{{Name: "repo", Path: "get"}}
				a.StdinSecret = true
				return a
			}(),
			Worker: func() Worker {
				w := exampleWorker()
				w.Platform = action.PlatformWindows
				w.WindowsPorterImage = "ghcr.io/porter-ci/porter:v0.1.0-windows-ltsc2022"
				w.NativeSidecars = false
				return w
			}(),
			Secrets: func() Secrets {
				s := exampleSecrets()
				s.Stdin = []byte(`{"source":{"uri":"https://example.com/repo.git"},"version":{"ref":"abc"}}`)
				return s
			}(),
		},
	}
}

const (
	fakeDigest  = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	otherDigest = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"
)

func exampleAction(stepID string) *action.Action {
	return &action.Action{
		StepID: stepID,
		Build: action.Build{
			ID:       "42",
			Name:     "7",
			Team:     "main",
			Pipeline: "hello-world",
			Job:      "hello-world-job",
		},
		StepName: "hello-world-task",
		Type:     action.KindTask,
		Image:    "busybox:1.36",
		Run:      action.Run{Path: "echo", Args: []string{"Hello, world!"}},
		WorkDir:  "/tmp/build/" + stepID,
	}
}

func exampleWorker() Worker {
	return Worker{
		Name:              "kind-default",
		Namespace:         "porter-steps",
		PorterImage:       "ghcr.io/porter-ci/porter:v0.1.0",
		ATCAddress:        "atc.porter-system.svc:7788",
		ATCServerName:     "atc.porter.example.com",
		BlobstoreEndpoint: "minio.porter-system.svc:9000",
		BlobstoreBucket:   "porter",
		BlobstoreRegion:   "us-east-1",
		BlobstoreSecure:   true,
		NativeSidecars:    true,
	}
}

func exampleSecrets() Secrets {
	return Secrets{
		StepToken:          "secret-step-token",
		ATCCA:              []byte("-----BEGIN CERTIFICATE-----\nsecret-ca-body\n-----END CERTIFICATE-----\n"),
		BlobstoreAccessKey: "secret-access-key-id",
		BlobstoreSecretKey: "secret-secret-access-key",
		// Step-scoped STS credentials come with a session token.
		BlobstoreSessionToken: "secret-session-token",
	}
}
