// Package podspec turns a step's resolved action and a worker's settings into
// the step's pod and its per-step Secret. It is a pure function: it talks to
// no API server, so the ATC, the tests and the e2e dry-run all see the same
// shapes.
package podspec

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/blobstore"
)

// Paths and names inside a step pod, shared with the porter binary.
const (
	// PorterDir is where the shared porter volume is mounted in every container.
	PorterDir = "/porter"
	// PorterBinDir is where the sidecar's postStart hook (`porter install`)
	// copies the binary.
	PorterBinDir = PorterDir + "/bin"
	// SocketPath is the control socket between the sidecar and the entrypoint.
	SocketPath = PorterDir + "/run/control.sock"
	// PorterImageBinary is where the porter image keeps its binary; absolute
	// so nothing depends on the image's PATH.
	PorterImageBinary = "/usr/local/bin/porter"

	SidecarContainerName = "porter-sidecar"
	StepContainerName    = "step"

	// annotationDefaultContainer is the container kubectl picks by default.
	annotationDefaultContainer = "kubectl.kubernetes.io/default-container"

	porterVolumeName     = "porter"
	workDirVolumeName    = "workdir"
	stdinVolumeName      = "porter-stdin"
	sidecarTmpVolumeName = "porter-tmp"
	journalVolumeName    = "porter-journal"

	// StdinDir is where the sidecar finds a secret stdin (file StdinFile).
	StdinDir  = "/var/run/porter-stdin"
	StdinFile = "stdin"
	// JournalDir holds the sidecar's event journal (the audit trail's
	// events): a volume the step container does not mount, so that step code
	// cannot edit its own record before it is uploaded.
	JournalDir = "/var/run/porter-journal"
)

// The same paths in a Windows step pod (Worker.Platform "windows").
const (
	WindowsPorterDir    = `C:\porter`
	WindowsPorterBinDir = WindowsPorterDir + `\bin`
	WindowsSocketPath   = WindowsPorterDir + `\run\control.sock`
	// WindowsPorterImageBinary is where the Windows porter image
	// (Worker.WindowsPorterImage) keeps porter.exe.
	WindowsPorterImageBinary = `C:\bin\porter.exe`
	WindowsStdinDir          = `C:\porter-stdin`
	WindowsJournalDir        = `C:\porter-journal`
	// windowsEntrypoint is the binary `porter install` puts into the
	// shared volume on Windows.
	windowsEntrypoint = WindowsPorterBinDir + `\porter.exe`

	// LabelOS is the well-known node label of the node's operating system.
	LabelOS = "kubernetes.io/os"
)

// Environment variables porter sets in the step pod.
const (
	EnvATCAddress         = "PORTER_ATC_ADDRESS"
	EnvATCServerName      = "PORTER_ATC_SERVER_NAME"
	EnvATCCAPEM           = "PORTER_ATC_CA_PEM"
	EnvSocket             = "PORTER_SOCKET"
	EnvJournalDir         = "PORTER_JOURNAL_DIR"
	EnvPodName            = "PORTER_POD_NAME"
	EnvNativeSidecar      = "PORTER_NATIVE_SIDECAR"
	EnvStepToken          = "PORTER_STEP_TOKEN"
	EnvBlobstoreEndpoint  = "PORTER_BLOBSTORE_ENDPOINT"
	EnvBlobstoreBucket    = "PORTER_BLOBSTORE_BUCKET"
	EnvBlobstoreRegion    = "PORTER_BLOBSTORE_REGION"
	EnvBlobstoreSecure    = "PORTER_BLOBSTORE_SECURE"
	EnvBlobstoreAccessKey = "PORTER_BLOBSTORE_ACCESS_KEY"
	EnvBlobstoreSecretKey = "PORTER_BLOBSTORE_SECRET_KEY"
	EnvBlobstoreToken     = "PORTER_BLOBSTORE_SESSION_TOKEN"
	// EnvRedact is a JSON list of the values the sidecar redacts from the
	// step's audit journal (from the Secret).
	EnvRedact = "PORTER_REDACT"
)

// Keys of the per-step Secret.
const (
	SecretKeyStepToken          = "step-token"
	SecretKeyATCCA              = "atc-ca.crt"
	SecretKeyStdin              = "stdin"
	SecretKeyBlobstoreAccessKey = "blobstore-access-key"
	SecretKeyBlobstoreSecretKey = "blobstore-secret-key"
	SecretKeyBlobstoreToken     = "blobstore-session-token"
	SecretKeyRedact             = "redact"
	secretKeyParamPrefix        = "param-"
)

// Defaults applied when a Worker leaves a setting empty.
const (
	DefaultUploadAllowance = 10 * time.Minute
	DefaultDNSPolicy       = corev1.DNSClusterFirst

	// terminationGracePeriod is short because the entrypoint already handles
	// abort and timeout itself; Kubernetes' grace period only matters when the
	// pod is deleted from outside.
	terminationGracePeriod = 10 * time.Second
)

// Worker is the part of a worker's configuration a step pod depends on.
type Worker struct {
	// Name is the worker's name, written into the pods' labels.
	Name      string
	Namespace string
	// PorterImage is the image holding the porter binary at PorterImageBinary.
	PorterImage string
	// ATCAddress is the host:port sidecars dial.
	ATCAddress string
	// ATCServerName overrides the TLS server name checked on the ATC's
	// certificate; empty means the host of ATCAddress.
	ATCServerName string

	BlobstoreEndpoint string
	BlobstoreBucket   string
	BlobstoreRegion   string
	BlobstoreSecure   bool

	// ImagePullPolicy applies to every container; empty leaves Kubernetes'
	// default (Always for :latest, IfNotPresent otherwise).
	ImagePullPolicy corev1.PullPolicy
	// NativeSidecars runs the sidecar as an init container with restartPolicy
	// Always (Kubernetes 1.29+). False makes it a regular container next to
	// the step (it then exits on its own): that also works on older clusters
	// and starts the step sooner, in the same kubelet sync as the sidecar
	// instead of after a relist that has seen the sidecar running.
	NativeSidecars bool
	// DNSPolicy defaults to ClusterFirst.
	DNSPolicy corev1.DNSPolicy
	// UploadAllowance is the time activeDeadlineSeconds leaves beyond the
	// step's timeout and keep-alive for everything around the process: image
	// pull, input downloads and output uploads. Defaults to
	// DefaultUploadAllowance.
	UploadAllowance time.Duration

	// Platform is the worker's: "linux" (also when empty) or "windows",
	// which gives its pods the Windows shape (see Build). A step runs only
	// on a worker of its own platform.
	Platform string
	// WindowsPorterImage is the porter image built for Windows, holding
	// porter.exe at WindowsPorterImageBinary; a Windows worker's pods use
	// it instead of PorterImage.
	WindowsPorterImage string
	// TagPlacement is where, inside the worker's cluster, the steps of a
	// tag run: each tag a step asks for adds its node selector and
	// tolerations to the step's pod. A tag without an entry adds nothing.
	TagPlacement map[string]Placement
	// ImagePullSecrets name Secrets of the worker's namespace the kubelet
	// may pull any step image with; they follow the step's own pull Secret
	// in the pod's imagePullSecrets.
	ImagePullSecrets []string
	// AllowPrivileged lets the worker run privileged steps (its workers
	// config says `privileged: allow`). Build refuses a privileged step on
	// any other worker, whatever its namespace's Pod Security level.
	AllowPrivileged bool

	// Bounds are the resource bounds of its step pods.
	Bounds
}

// Bounds are what a worker's step pods may use beyond the task's own
// container_limits: set by serve's --step-* flags (cmd/atc-porter-runtime).
type Bounds struct {
	// HardCPULimit also sets a task's container_limits.cpu as the step's
	// CPU limit. By default it is only a request: Concourse's cpu is
	// relative CPU shares, which never cap a step on an idle node.
	HardCPULimit bool
	// VolumeSizeLimit is the sizeLimit of each emptyDir of a step pod
	// (work directory, inputs, outputs, caches; porter's own gets 256Mi
	// more for the porter binary): the kubelet evicts a pod that writes
	// more into one of them. Nil means none.
	VolumeSizeLimit *resource.Quantity
	// EphemeralStorageRequest and EphemeralStorageLimit are the step
	// container's ephemeral-storage request and limit (its writable layer
	// and logs; with a limit, the pod's emptyDirs count too). Nil means
	// none.
	EphemeralStorageRequest *resource.Quantity
	EphemeralStorageLimit   *resource.Quantity
	// MaxExtractBytes and MaxExtractFiles cap what the sidecar extracts
	// from one input or cache (blobstore.ExtractLimits); 0 means
	// blobstore's defaults.
	MaxExtractBytes int64
	MaxExtractFiles int64
}

// Placement is a tag's share of a pod's scheduling constraints.
type Placement struct {
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
}

// os is the worker's platform, empty meaning linux.
func (w Worker) os() string {
	if w.Platform == "" {
		return action.PlatformLinux
	}
	return w.Platform
}

// shape is what differs between a Linux and a Windows step pod: where
// porter lives and how an action's paths appear in the pod.
type shape struct {
	windows     bool
	porterImage string
	// imageBinary is porter inside the porter image; entrypoint is the
	// copy the sidecar installs into binDir for the step container.
	imageBinary, entrypoint string
	porterDir, binDir       string
	socket, stdinDir        string
	journalDir              string
}

func shapeOf(w Worker) shape {
	if w.os() == action.PlatformWindows {
		return shape{
			windows: true, porterImage: w.WindowsPorterImage,
			imageBinary: WindowsPorterImageBinary, entrypoint: windowsEntrypoint,
			porterDir: WindowsPorterDir, binDir: WindowsPorterBinDir,
			socket: WindowsSocketPath, stdinDir: WindowsStdinDir, journalDir: WindowsJournalDir,
		}
	}
	return shape{
		porterImage: w.PorterImage,
		imageBinary: PorterImageBinary, entrypoint: PorterBinDir + "/porter",
		porterDir: PorterDir, binDir: PorterBinDir,
		socket: SocketPath, stdinDir: StdinDir, journalDir: JournalDir,
	}
}

// path is an action's absolute path as the pod spec writes it. On Windows
// "/tmp/build/1" becomes C:\tmp\build\1: the same directory the sidecar
// and the entrypoint reach through the action's own slash path, which
// Windows resolves on the container's current drive, C:.
func (sh shape) path(p string) string {
	if !sh.windows {
		return p
	}
	return `C:` + strings.ReplaceAll(p, "/", `\`)
}

// join is a file of a directory of the pod.
func (sh shape) join(dir, file string) string {
	if sh.windows {
		return dir + `\` + file
	}
	return dir + "/" + file
}

// MaxSecretStdin is how much stdin the step's Secret carries (Kubernetes
// caps a Secret at 1 MiB, the other keys included).
const MaxSecretStdin = 900 << 10

// Secrets are the secret values of one step. They go into the step's Secret
// only; the pod refers to them by key.
type Secrets struct {
	// StepToken authenticates the sidecar to the ATC.
	StepToken string
	// ATCCA is the PEM bundle the sidecar trusts for the ATC; empty means the
	// system roots.
	ATCCA []byte
	// Blobstore credentials; both empty means the sidecar uses its ambient
	// credentials (e.g. a cloud workload identity).
	BlobstoreAccessKey string
	BlobstoreSecretKey string
	// BlobstoreSessionToken comes with temporary, step-scoped credentials.
	BlobstoreSessionToken string
	// Params holds the value of each of the action's SecretParams by name.
	Params map[string]string
	// Stdin is the process's stdin when the action says it is secret
	// (StdinSecret): a file of the Secret, mounted into the sidecar only.
	Stdin []byte
	// Redact are the values (the build's credentials) the sidecar
	// redacts from the step's audit journal, as the ATC does from its events.
	Redact []string
	// ImagePull, when set, are the credentials the kubelet pulls the step's
	// image with: they go into the step's pull Secret (PullSecret), which
	// the pod names in imagePullSecrets.
	ImagePull *RegistryAuth
}

// RegistryAuth is a login to the registry of a step's image.
type RegistryAuth struct {
	Username string
	Password string
}

// Build returns the pod and the Secret for a step. The Secret must be created
// first (the pod refers to it), then the pod, then OwnedBy/OwnerPatch ties
// the Secret's lifetime to the pod.
func Build(a *action.Action, w Worker, s Secrets) (*corev1.Pod, *corev1.Secret, error) {
	if err := validate(a, w, s); err != nil {
		return nil, nil, err
	}
	sh := shapeOf(w)
	name := Name(a.StepID)
	labels := StepLabels(a.StepID, a.Build.ID, a.Build.Team, w.Name)
	placement, err := placementOf(a, w)
	if err != nil {
		return nil, nil, fmt.Errorf("build pod for step %q: %w", a.StepID, err)
	}

	secret, paramKeys := buildSecret(name, w.Namespace, labels, a, s)

	actionJSON, err := a.Encode()
	if err != nil {
		return nil, nil, fmt.Errorf("build pod for step %s: encode action: %w", a.StepID, err)
	}
	resources, err := stepResources(a.Limits, w)
	if err != nil {
		return nil, nil, fmt.Errorf("build pod for step %s: %w", a.StepID, err)
	}

	volumes, sidecarMounts, stepMounts := buildVolumes(a, sh, w.VolumeSizeLimit)
	if a.StdinSecret {
		// The step container never sees the Secret: the sidecar hands the
		// request to the process.
		source := &corev1.SecretVolumeSource{SecretName: name, Items: []corev1.KeyToPath{{Key: SecretKeyStdin, Path: StdinFile}}}
		if !sh.windows {
			// File modes are Linux-only.
			source.DefaultMode = ptr(int32(0o400))
		}
		volumes = append(volumes, corev1.Volume{Name: stdinVolumeName, VolumeSource: corev1.VolumeSource{Secret: source}})
		sidecarMounts = append(sidecarMounts, corev1.VolumeMount{Name: stdinVolumeName, MountPath: sh.stdinDir, ReadOnly: true})
	}

	sidecar := corev1.Container{
		Name:                     SidecarContainerName,
		Image:                    sh.porterImage,
		ImagePullPolicy:          w.ImagePullPolicy,
		Command:                  []string{sh.imageBinary, "sidecar"},
		Env:                      sidecarEnv(name, string(actionJSON), a, w, s, sh),
		VolumeMounts:             sidecarMounts,
		Resources:                smallRequests(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		// The sidecar puts porter where the step container finds it. A
		// postStart hook, not an init container: the kubelet runs it before
		// it starts the next container of the same sync, while every init
		// container would cost a PLEG relist (up to 1 s) before the next one.
		Lifecycle: &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{sh.imageBinary, "install", sh.binDir}},
		}},
	}

	step := corev1.Container{
		Name:                     StepContainerName,
		Image:                    a.Image,
		ImagePullPolicy:          w.ImagePullPolicy,
		Command:                  append([]string{sh.entrypoint, "entrypoint", "--"}, verbatim(append([]string{a.Run.Path}, a.Run.Args...))...),
		WorkingDir:               sh.path(a.WorkDir),
		Env:                      stepEnv(name, a, paramKeys, sh),
		VolumeMounts:             stepMounts,
		Resources:                resources,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if a.ImagePullPolicy != "" {
		step.ImagePullPolicy = corev1.PullPolicy(a.ImagePullPolicy)
	}
	var podSecurity *corev1.PodSecurityContext
	if !sh.windows {
		// The sidecar's root filesystem is read-only: its temporary files
		// go to a volume of its own.
		volumes = append(volumes, emptyDirSized(sidecarTmpVolumeName, w.VolumeSizeLimit))
		// First, so that it lies under any work directory in /tmp.
		sidecar.VolumeMounts = append([]corev1.VolumeMount{{Name: sidecarTmpVolumeName, MountPath: "/tmp"}}, sidecar.VolumeMounts...)
		var sec security
		podSecurity, sec = securityOf(a)
		sidecar.SecurityContext, step.SecurityContext = sec.sidecar, sec.step
	}

	// A native sidecar is an init container: the step container starts once
	// the kubelet has seen it running (one PLEG relist). Otherwise it comes
	// first among the containers, which the kubelet starts in order in one
	// sync, so its postStart hook has installed porter before the step starts.
	var initContainers []corev1.Container
	containers := []corev1.Container{sidecar, step}
	if w.NativeSidecars {
		sidecar.RestartPolicy = ptr(corev1.ContainerRestartPolicyAlways)
		initContainers, containers = []corev1.Container{sidecar}, []corev1.Container{step}
	}

	dnsPolicy := w.DNSPolicy
	if dnsPolicy == "" {
		dnsPolicy = DefaultDNSPolicy
	}

	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   w.Namespace,
			Labels:      labels,
			Annotations: annotations(a),
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			DNSPolicy:                     dnsPolicy,
			TerminationGracePeriodSeconds: ptr(int64(terminationGracePeriod / time.Second)),
			ActiveDeadlineSeconds:         activeDeadline(a, w),
			NodeSelector:                  placement.NodeSelector,
			Tolerations:                   placement.Tolerations,
			InitContainers:                initContainers,
			Containers:                    containers,
			Volumes:                       volumes,
			SecurityContext:               podSecurity,
		},
	}
	if sh.windows {
		// The API server then refuses every Linux-only field, and the
		// scheduler keeps the pod on Windows nodes.
		pod.Spec.OS = &corev1.PodOS{Name: corev1.Windows}
	}
	if s.ImagePull != nil {
		pod.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: PullSecretName(a.StepID)}}
	}
	for _, secretName := range w.ImagePullSecrets {
		ref := corev1.LocalObjectReference{Name: secretName}
		if !slices.Contains(pod.Spec.ImagePullSecrets, ref) {
			pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, ref)
		}
	}
	return pod, secret, nil
}

// placementOf merges the node selectors and tolerations of the step's tags,
// in the step's order, and on Windows the selector of Windows nodes. Two
// tags that want different values of one node label cannot both be met.
func placementOf(a *action.Action, w Worker) (Placement, error) {
	var p Placement
	from := map[string]string{} // node label -> what asked for it
	var errs []error
	add := func(source string, selector map[string]string) {
		for _, key := range sortedKeys(selector) {
			value := selector[key]
			if old, ok := p.NodeSelector[key]; ok {
				if old != value {
					errs = append(errs, fmt.Errorf("%s and %s select different values of node label %s (%q, %q)", from[key], source, key, old, value))
				}
				continue
			}
			if p.NodeSelector == nil {
				p.NodeSelector = map[string]string{}
			}
			p.NodeSelector[key], from[key] = value, source
		}
	}
	if w.os() == action.PlatformWindows {
		add("platform windows", map[string]string{LabelOS: action.PlatformWindows})
	}
	seen := map[string]bool{}
	for _, tag := range a.Tags {
		if tag == "" || seen[tag] {
			continue
		}
		seen[tag] = true
		tp := w.TagPlacement[tag]
		add(fmt.Sprintf("tag %q", tag), tp.NodeSelector)
		for _, t := range tp.Tolerations {
			if !slices.ContainsFunc(p.Tolerations, func(o corev1.Toleration) bool { return sameToleration(o, t) }) {
				p.Tolerations = append(p.Tolerations, t)
			}
		}
	}
	return p, errors.Join(errs...)
}

func sameToleration(a, b corev1.Toleration) bool {
	seconds := func(p *int64) int64 {
		if p == nil {
			return -1
		}
		return *p
	}
	return a.Key == b.Key && a.Operator == b.Operator && a.Value == b.Value && a.Effect == b.Effect &&
		(a.TolerationSeconds == nil) == (b.TolerationSeconds == nil) && seconds(a.TolerationSeconds) == seconds(b.TolerationSeconds)
}

// PullSecretName is the name of a step's pull Secret.
func PullSecretName(stepID string) string { return Name(stepID) + "-pull" }

// dockerHubKey is how a Docker config names Docker Hub; the kubelet matches
// it for images without a registry host ("busybox") too.
const dockerHubKey = "https://index.docker.io/v1/"

// PullSecret is the kubernetes.io/dockerconfigjson Secret that lets the
// kubelet pull the step's image (a.Image) with auth, for this one pod: it is
// created before the pod and, like the step's Secret, owned by it.
func PullSecret(a *action.Action, w Worker, auth RegistryAuth) (*corev1.Secret, error) {
	if auth.Username == "" || auth.Password == "" {
		return nil, fmt.Errorf("pull secret for step %q: username and password are required", a.StepID)
	}
	registry, err := imageRegistry(a.Image)
	if err != nil {
		return nil, fmt.Errorf("pull secret for step %q: %w", a.StepID, err)
	}
	type entry struct {
		Username string `json:"username"`
		Password string `json:"password"`
		Auth     string `json:"auth"`
	}
	config, err := json.Marshal(map[string]map[string]entry{"auths": {registry: {
		Username: auth.Username, Password: auth.Password,
		Auth: base64.StdEncoding.EncodeToString([]byte(auth.Username + ":" + auth.Password)),
	}}})
	if err != nil {
		return nil, fmt.Errorf("pull secret for step %q: %w", a.StepID, err)
	}
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      PullSecretName(a.StepID),
			Namespace: w.Namespace,
			Labels:    StepLabels(a.StepID, a.Build.ID, a.Build.Team, w.Name),
		},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: config},
	}, nil
}

// imageRegistry is the key of an image's registry in a Docker config: its
// host, or Docker Hub's key for images without one. As in Docker's
// references, the first path component is a host when it has a dot or a
// port, or is localhost.
func imageRegistry(image string) (string, error) {
	if image == "" {
		return "", errors.New("the step has no image")
	}
	first, rest, ok := strings.Cut(image, "/")
	if !ok || rest == "" || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		return dockerHubKey, nil
	}
	switch first {
	case "docker.io", "index.docker.io", "registry-1.docker.io":
		return dockerHubKey, nil
	}
	return first, nil
}

func validate(a *action.Action, w Worker, s Secrets) error {
	if a == nil {
		return errors.New("build pod: action is nil")
	}
	var errs []error
	if err := a.Validate(); err != nil {
		errs = append(errs, err)
	}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if a.Image == "" {
		bad("action has no image")
	}
	errs = append(errs, w.problems()...)
	if w.os() == action.PlatformWindows {
		// Windows containers have neither privileged mode nor a user
		// switch inside the container.
		if a.Privileged {
			bad("privileged steps are linux-only; worker %q is a windows worker", w.Name)
		}
		if a.Run.User != "" {
			bad("run.user %q is not supported on windows worker %q", a.Run.User, w.Name)
		}
	}
	if a.OS() != w.os() {
		bad("a %s step cannot run on worker %q, whose platform is %s", a.OS(), w.Name, w.os())
	}
	if a.Privileged && !w.AllowPrivileged && w.os() != action.PlatformWindows {
		bad("%s", PrivilegedNotAllowed(w.Name))
	}
	if s.StepToken == "" {
		bad("step token is empty")
	}
	if (s.Stdin != nil) != a.StdinSecret {
		bad("a secret stdin is given exactly when the action says its stdin is secret")
	}
	if len(s.Stdin) > MaxSecretStdin {
		bad("stdin is %d bytes; a Secret holds at most %d", len(s.Stdin), MaxSecretStdin)
	}
	if s.ImagePull != nil && (s.ImagePull.Username == "" || s.ImagePull.Password == "") {
		bad("image pull credentials need a username and a password")
	}
	if (s.BlobstoreAccessKey == "") != (s.BlobstoreSecretKey == "") {
		bad("blobstore access key and secret key must be given together")
	}
	secret := make(map[string]bool, len(a.SecretParams))
	for _, name := range a.SecretParams {
		if secret[name] {
			bad("secret param %q is listed twice", name)
		}
		secret[name] = true
		if _, ok := a.Params[name]; ok {
			bad("param %q is both plain and secret", name)
		}
		if _, ok := s.Params[name]; !ok {
			bad("secret param %q has no value", name)
		}
	}
	for name := range s.Params {
		if !secret[name] {
			bad("secret value given for %q, which is not one of the action's secret params", name)
		}
	}
	for name := range a.Params {
		checkEnvName(name, bad)
	}
	for _, name := range a.SecretParams {
		checkEnvName(name, bad)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("build pod for step %q: %w", a.StepID, err)
	}
	return nil
}

// Validate checks a worker's settings on their own, so that a bad worker
// configuration is reported when it is loaded rather than by every step.
// Build checks them too.
func (w Worker) Validate() error {
	if err := errors.Join(w.problems()...); err != nil {
		return fmt.Errorf("worker %q: %w", w.Name, err)
	}
	return nil
}

func (w Worker) problems() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if w.Name == "" {
		bad("worker name is empty")
	}
	if w.Namespace == "" {
		bad("worker namespace is empty")
	} else if msgs := validation.IsDNS1123Label(w.Namespace); len(msgs) > 0 {
		bad("worker namespace %q is invalid: %v", w.Namespace, msgs)
	}
	switch w.Platform {
	case "", action.PlatformLinux:
		if w.PorterImage == "" {
			bad("worker porter image is empty")
		}
	case action.PlatformWindows:
		if w.WindowsPorterImage == "" {
			bad("worker %q is a windows worker but has no windows porter image", w.Name)
		}
	default:
		bad("worker platform %q: want linux or windows", w.Platform)
	}
	for _, tag := range sortedKeys(w.TagPlacement) {
		tp := w.TagPlacement[tag]
		for _, key := range sortedKeys(tp.NodeSelector) {
			if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
				bad("tag %q: node label %q is invalid: %v", tag, key, msgs)
			}
			if value := tp.NodeSelector[key]; len(validation.IsValidLabelValue(value)) > 0 {
				bad("tag %q: node label value %q is invalid: %v", tag, value, validation.IsValidLabelValue(value))
			}
		}
	}
	for _, name := range w.ImagePullSecrets {
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			bad("worker image pull secret %q is invalid: %v", name, msgs)
		}
	}
	if w.ATCAddress == "" {
		bad("worker ATC address is empty")
	}
	if w.UploadAllowance < 0 {
		bad("worker upload allowance %s is negative", w.UploadAllowance)
	}
	for what, q := range map[string]*resource.Quantity{
		"step volume size limit":         w.VolumeSizeLimit,
		"step ephemeral-storage request": w.EphemeralStorageRequest,
		"step ephemeral-storage limit":   w.EphemeralStorageLimit,
	} {
		if q != nil && q.Sign() <= 0 {
			bad("worker %s %s is not positive", what, q)
		}
	}
	if w.MaxExtractBytes < 0 || w.MaxExtractFiles < 0 {
		bad("worker extraction caps (%d bytes, %d files) are negative", w.MaxExtractBytes, w.MaxExtractFiles)
	}
	if r, l := w.EphemeralStorageRequest, w.EphemeralStorageLimit; r != nil && l != nil && r.Cmp(*l) > 0 {
		bad("worker step ephemeral-storage request %s is above its limit %s", r, l)
	}
	return errs
}

func checkEnvName(name string, bad func(string, ...any)) {
	if msgs := validation.IsRelaxedEnvVarName(name); len(msgs) > 0 {
		bad("param name %q is invalid: %v", name, msgs)
	}
	if name == EnvSocket {
		bad("param name %q is reserved by porter", name)
	}
}

func annotations(a *action.Action) map[string]string {
	// kubectl logs and exec pick the step, whichever container comes first.
	m := map[string]string{AnnotationStepName: a.StepName, annotationDefaultContainer: StepContainerName}
	if a.Build.Name != "" {
		m[AnnotationBuildName] = a.Build.Name
	}
	return m
}

// activeDeadline is a backstop only: the entrypoint enforces the timeout
// itself so that logs and the result still get out. The deadline leaves room
// for everything around the process and for the keep-alive window.
func activeDeadline(a *action.Action, w Worker) *int64 {
	if a.Timeout.Duration <= 0 {
		return nil
	}
	allowance := w.UploadAllowance
	if allowance == 0 {
		allowance = DefaultUploadAllowance
	}
	total := a.Timeout.Duration + allowance + a.KeepAlive.Duration
	seconds := int64(math.Ceil(total.Seconds()))
	return &seconds
}

func buildSecret(name, namespace string, labels map[string]string, a *action.Action, s Secrets) (*corev1.Secret, map[string]string) {
	data := map[string][]byte{SecretKeyStepToken: []byte(s.StepToken)}
	if len(s.ATCCA) > 0 {
		data[SecretKeyATCCA] = s.ATCCA
	}
	if s.BlobstoreAccessKey != "" {
		data[SecretKeyBlobstoreAccessKey] = []byte(s.BlobstoreAccessKey)
		data[SecretKeyBlobstoreSecretKey] = []byte(s.BlobstoreSecretKey)
		if s.BlobstoreSessionToken != "" {
			data[SecretKeyBlobstoreToken] = []byte(s.BlobstoreSessionToken)
		}
	}
	if a.StdinSecret {
		data[SecretKeyStdin] = s.Stdin
	}
	if len(s.Redact) > 0 {
		data[SecretKeyRedact], _ = json.Marshal(s.Redact) // a []string always encodes
	}
	// Param names may hold characters Secret keys refuse, so keys are by
	// position in SecretParams.
	paramKeys := make(map[string]string, len(a.SecretParams))
	for i, param := range a.SecretParams {
		key := secretKeyParamPrefix + strconv.Itoa(i)
		paramKeys[param] = key
		data[key] = []byte(s.Params[param])
	}
	secret := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels:    maps.Clone(labels),
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	return secret, paramKeys
}

func sidecarEnv(secretName, actionJSON string, a *action.Action, w Worker, s Secrets, sh shape) []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: action.EnvVar, Value: verbatim1(actionJSON)},
		{Name: EnvATCAddress, Value: w.ATCAddress},
	}
	if a.StdinSecret {
		env = append(env, corev1.EnvVar{Name: action.StdinFileEnvVar, Value: sh.join(sh.stdinDir, StdinFile)})
	}
	if w.ATCServerName != "" {
		env = append(env, corev1.EnvVar{Name: EnvATCServerName, Value: w.ATCServerName})
	}
	env = append(env,
		corev1.EnvVar{Name: EnvSocket, Value: sh.socket},
		corev1.EnvVar{Name: EnvJournalDir, Value: sh.journalDir},
		corev1.EnvVar{Name: EnvPodName, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
		}},
		corev1.EnvVar{Name: EnvBlobstoreEndpoint, Value: w.BlobstoreEndpoint},
		corev1.EnvVar{Name: EnvBlobstoreBucket, Value: w.BlobstoreBucket},
		corev1.EnvVar{Name: EnvBlobstoreRegion, Value: w.BlobstoreRegion},
		corev1.EnvVar{Name: EnvBlobstoreSecure, Value: strconv.FormatBool(w.BlobstoreSecure)},
		secretEnv(EnvStepToken, secretName, SecretKeyStepToken),
	)
	if len(s.ATCCA) > 0 {
		env = append(env, secretEnv(EnvATCCAPEM, secretName, SecretKeyATCCA))
	}
	if w.MaxExtractBytes > 0 {
		env = append(env, corev1.EnvVar{Name: blobstore.EnvMaxExtractBytes, Value: strconv.FormatInt(w.MaxExtractBytes, 10)})
	}
	if w.MaxExtractFiles > 0 {
		env = append(env, corev1.EnvVar{Name: blobstore.EnvMaxExtractFiles, Value: strconv.FormatInt(w.MaxExtractFiles, 10)})
	}
	if w.NativeSidecars {
		// A native sidecar that exits is restarted: it must wait for the
		// kubelet's TERM, which comes once the main container has ended.
		env = append(env, corev1.EnvVar{Name: EnvNativeSidecar, Value: "true"})
	}
	if len(s.Redact) > 0 {
		env = append(env, secretEnv(EnvRedact, secretName, SecretKeyRedact))
	}
	if s.BlobstoreAccessKey != "" {
		env = append(env,
			secretEnv(EnvBlobstoreAccessKey, secretName, SecretKeyBlobstoreAccessKey),
			secretEnv(EnvBlobstoreSecretKey, secretName, SecretKeyBlobstoreSecretKey),
		)
		if s.BlobstoreSessionToken != "" {
			env = append(env, secretEnv(EnvBlobstoreToken, secretName, SecretKeyBlobstoreToken))
		}
	}
	return env
}

func stepEnv(secretName string, a *action.Action, paramKeys map[string]string, sh shape) []corev1.EnvVar {
	env := make([]corev1.EnvVar, 0, len(a.Params)+len(a.SecretParams)+1)
	for _, name := range sortedKeys(a.Params) {
		env = append(env, corev1.EnvVar{Name: name, Value: verbatim1(a.Params[name])})
	}
	for _, name := range sortedKeys(paramKeys) {
		env = append(env, secretEnv(name, secretName, paramKeys[name]))
	}
	return append(env, corev1.EnvVar{Name: EnvSocket, Value: sh.socket})
}

func secretEnv(name, secretName, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secretName},
			Key:                  key,
		},
	}}
}

// buildVolumes gives every distinct input, output and cache directory its own
// emptyDir, mounted at the same place in the sidecar (which fills and
// empties it) and in the step container (which uses it). An output at the
// same path as an input is that input, modified, so it shares its volume.
func buildVolumes(a *action.Action, sh shape, sizeLimit *resource.Quantity) (volumes []corev1.Volume, sidecarMounts, stepMounts []corev1.VolumeMount) {
	porterLimit := sizeLimit
	if sizeLimit != nil {
		// porter's own volume also holds the porter binary.
		q := sizeLimit.DeepCopy()
		q.Add(porterVolumeReserve)
		porterLimit = &q
	}
	volumes = []corev1.Volume{emptyDirSized(porterVolumeName, porterLimit), emptyDirSized(workDirVolumeName, sizeLimit)}
	porterMount := corev1.VolumeMount{Name: porterVolumeName, MountPath: sh.porterDir}
	// The journal's volume is the sidecar's alone (see JournalDir).
	volumes = append(volumes, emptyDirSized(journalVolumeName, sizeLimit))
	sidecarMounts = []corev1.VolumeMount{porterMount, {Name: journalVolumeName, MountPath: sh.journalDir}}
	// The work directory is a volume of its own so that it exists and is
	// writable whatever the image and the run user.
	stepMounts = []corev1.VolumeMount{porterMount, {Name: workDirVolumeName, MountPath: sh.path(a.WorkDir)}}

	byDir := map[string]bool{}
	add := func(volume, p string) {
		dir := a.Dir(p)
		if byDir[dir] {
			return
		}
		byDir[dir] = true
		volumes = append(volumes, emptyDirSized(volume, sizeLimit))
		mount := corev1.VolumeMount{Name: volume, MountPath: sh.path(dir)}
		sidecarMounts = append(sidecarMounts, mount)
		stepMounts = append(stepMounts, mount)
	}
	for i, in := range a.Inputs {
		// An optional input nobody provided has no directory.
		if in.Key == "" && in.Optional {
			continue
		}
		add(fmt.Sprintf("input-%d", i), in.Path)
	}
	for i, out := range a.Outputs {
		add(fmt.Sprintf("output-%d", i), out.Path)
	}
	for i, c := range a.Caches {
		add(fmt.Sprintf("cache-%d", i), c.Path)
	}
	return volumes, sidecarMounts, stepMounts
}

// porterVolumeReserve is what the porter volume holds beyond the worker's
// VolumeSizeLimit: the installed porter binary.
var porterVolumeReserve = resource.MustParse("256Mi")

func emptyDirSized(name string, sizeLimit *resource.Quantity) corev1.Volume {
	source := &corev1.EmptyDirVolumeSource{}
	if sizeLimit != nil {
		q := sizeLimit.DeepCopy()
		source.SizeLimit = &q
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: source}}
}

// stepResources turns Concourse's container_limits into Kubernetes resources.
//
// Concourse's cpu is in cgroup CPU shares, a weight relative to other
// containers (1024 weigh as much as one CPU); Kubernetes itself converts a
// CPU request of 1 into 1024 shares. So N shares become a request of
// N*1000/1024 millicores (at least 1m) and, unless the worker asks for hard
// limits, no CPU limit: shares never cap a step on an idle node. Memory is
// bytes, the limit and also the request, so that the scheduler places the
// pod where the memory exists. As in Concourse (Garden), 0 means unlimited:
// no request and no limit.
func stepResources(l action.Limits, w Worker) (corev1.ResourceRequirements, error) {
	var r corev1.ResourceRequirements
	set := func(list *corev1.ResourceList, name corev1.ResourceName, q resource.Quantity) {
		if *list == nil {
			*list = corev1.ResourceList{}
		}
		(*list)[name] = q
	}
	if l.CPUShares != nil && *l.CPUShares > 0 {
		shares := *l.CPUShares
		if shares > math.MaxInt64/1000 {
			return r, fmt.Errorf("cpu limit %d shares is too large", shares)
		}
		milli := *resource.NewMilliQuantity(max(int64(shares)*1000/1024, 1), resource.DecimalSI)
		set(&r.Requests, corev1.ResourceCPU, milli)
		if w.HardCPULimit {
			set(&r.Limits, corev1.ResourceCPU, milli)
		}
	}
	if l.MemoryBytes != nil && *l.MemoryBytes > 0 {
		bytes := *l.MemoryBytes
		if bytes > math.MaxInt64 {
			return r, fmt.Errorf("memory limit %d bytes is too large", bytes)
		}
		set(&r.Requests, corev1.ResourceMemory, *resource.NewQuantity(int64(bytes), resource.BinarySI))
		set(&r.Limits, corev1.ResourceMemory, *resource.NewQuantity(int64(bytes), resource.BinarySI))
	}
	if q := w.EphemeralStorageRequest; q != nil {
		set(&r.Requests, corev1.ResourceEphemeralStorage, q.DeepCopy())
	}
	if q := w.EphemeralStorageLimit; q != nil {
		set(&r.Limits, corev1.ResourceEphemeralStorage, q.DeepCopy())
	}
	return r, nil
}

// smallRequests are the requests of porter's own containers: they mostly
// wait on the network, and requests keep them schedulable on busy nodes.
func smallRequests() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("10m"),
		corev1.ResourceMemory: resource.MustParse("32Mi"),
	}}
}

// OwnedBy makes the created pod the owner of the step's Secret, so that
// deleting the pod deletes the Secret too. The pod must have its UID, i.e.
// be the object the API server returned.
func OwnedBy(secret *corev1.Secret, pod *corev1.Pod) error {
	ref, err := ownerReference(pod)
	if err != nil {
		return err
	}
	secret.OwnerReferences = []metav1.OwnerReference{ref}
	return nil
}

// OwnerPatch is the JSON merge patch that makes pod the owner of its step's
// Secret, for the ATC to send right after the pod was created.
func OwnerPatch(pod *corev1.Pod) ([]byte, error) {
	ref, err := ownerReference(pod)
	if err != nil {
		return nil, err
	}
	patch := map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{ref}}}
	data, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("owner patch for pod %q: %w", pod.Name, err)
	}
	return data, nil
}

func ownerReference(pod *corev1.Pod) (metav1.OwnerReference, error) {
	if pod.Name == "" || pod.UID == "" {
		return metav1.OwnerReference{}, fmt.Errorf("owner reference to pod %q: pod has no name or UID yet", pod.Name)
	}
	// No blockOwnerDeletion: setting it needs permission to update the pod's
	// finalizers, and nothing waits on the Secret's deletion.
	return metav1.OwnerReference{
		APIVersion: "v1",
		Kind:       "Pod",
		Name:       pod.Name,
		UID:        pod.UID,
	}, nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func ptr[T any](v T) *T { return &v }

// verbatim1 escapes s from the kubelet's $(VAR) expansion of container
// commands, args and env values: every "$" doubles, which the kubelet turns
// back into one, so "$$", "$(NAME)" and the like reach the process as the
// user wrote them (Concourse passes args and params verbatim).
func verbatim1(s string) string { return strings.ReplaceAll(s, "$", "$$") }

// verbatim is verbatim1 of each string.
func verbatim(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = verbatim1(s)
	}
	return out
}

// DeclaredAction is the action a step pod was declared with, read back from
// its sidecar's environment: a server that resumes a gated step gives it
// the go-ahead from what its pod says it is.
func DeclaredAction(pod *corev1.Pod) (*action.Action, error) {
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		if c.Name != SidecarContainerName {
			continue
		}
		for _, e := range c.Env {
			if e.Name == action.EnvVar {
				// The kubelet turns "$$" back into "$" (verbatim1).
				a, err := action.Decode([]byte(strings.ReplaceAll(e.Value, "$$", "$")))
				if err != nil {
					return nil, fmt.Errorf("pod %s's action: %w", pod.Name, err)
				}
				return a, nil
			}
		}
	}
	return nil, fmt.Errorf("pod %s has no %s in its %s container", pod.Name, action.EnvVar, SidecarContainerName)
}
