package podspec

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/porter-ci/porter/pkg/action"
)

// security is the securityContext of each container of a Linux step pod.
type security struct {
	sidecar, step *corev1.SecurityContext
}

// sidecarCapabilities are all a root sidecar keeps: it extracts inputs with
// their recorded ownership and modes (CHOWN, FOWNER, FSETID) and archives
// outputs and caches whoever wrote them, 0600 files included
// (DAC_OVERRIDE). All four are in the baseline Pod Security Standard's list.
var sidecarCapabilities = []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"}

// securityOf is the least privilege a Linux step pod runs with. Two shapes:
//
//   - restricted (the "restricted" Pod Security Standard): when the task sets
//     run.user to a numeric non-root uid and is not privileged. The whole pod
//     runs as that uid (and the given gid, else the uid), so the sidecar reads
//     and writes exactly what the step does; every container drops all
//     capabilities.
//   - baseline: otherwise. The step runs as its image's user, often root,
//     and keeps the runtime's default capabilities (a root step installs
//     packages, chowns, switches to run.user by name) but NET_RAW, and
//     cannot gain privileges through setuid binaries. The sidecar stays root, since it
//     must read what any user wrote and restore recorded ownership, with
//     only sidecarCapabilities.
//
// In both, every container has the runtime's default seccomp profile and
// the sidecar a read-only root filesystem. A privileged step is privileged
// and nothing else; it needs a worker that allows it (Worker.AllowPrivileged)
// and a namespace whose Pod Security level is "privileged" (the API server
// refuses it under baseline and restricted).
func securityOf(a *action.Action) (*corev1.PodSecurityContext, security) {
	pod := &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	sidecar := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr(false),
		ReadOnlyRootFilesystem:   ptr(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	if a.Privileged {
		sidecar.Capabilities.Add = sidecarCapabilities
		return pod, security{sidecar: sidecar, step: &corev1.SecurityContext{Privileged: ptr(true)}}
	}
	// NET_RAW (raw and packet sockets: ping, but also forged packets and
	// ARP spoofing of the node's other pods) is the one default
	// capability a build has no use for that baseline does not drop.
	step := &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW"}}}
	uid, gid, ok := NonRootUser(a.Run.User)
	if !ok {
		sidecar.Capabilities.Add = sidecarCapabilities
		return pod, security{sidecar: sidecar, step: step}
	}
	pod.RunAsNonRoot = ptr(true)
	pod.RunAsUser, pod.RunAsGroup = ptr(uid), ptr(gid)
	// The Secret volume (a resource step's stdin) becomes readable by the
	// pod's group.
	pod.FSGroup = ptr(gid)
	step.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	return pod, security{sidecar: sidecar, step: step}
}

// NonRootUser reads a run.user of the form uid or uid:gid with a non-zero
// uid, the only users a pod can be told to run as without knowing the
// image's /etc/passwd. gid defaults to uid.
func NonRootUser(spec string) (uid, gid int64, ok bool) {
	u, g, hasGroup := strings.Cut(spec, ":")
	uid, err := strconv.ParseInt(u, 10, 32)
	if err != nil || uid <= 0 {
		return 0, 0, false
	}
	gid = uid
	if hasGroup {
		if gid, err = strconv.ParseInt(g, 10, 32); err != nil || gid < 0 {
			return 0, 0, false
		}
	}
	return uid, gid, true
}

// PrivilegedNotAllowed is the error of a privileged step on a worker whose
// config does not allow privileged steps: it names the worker and the
// setting that would.
func PrivilegedNotAllowed(worker string) string {
	return fmt.Sprintf("worker %q does not allow privileged steps: its workers config (--workers-config) must say `privileged: allow`, "+
		"and its namespace must be labelled pod-security.kubernetes.io/enforce=privileged (docs/step-pod-security.md)", worker)
}
