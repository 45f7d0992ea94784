package podspec

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// Label keys Porter puts on every pod and Secret it creates.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelWorker    = "porter.dev/worker"
	LabelBuild     = "porter.dev/build"
	LabelStep      = "porter.dev/step"
	LabelTeam      = "porter.dev/team"

	// ManagedByPorter is the value of LabelManagedBy on Porter's objects.
	ManagedByPorter = "porter"
)

// Annotation keys carry the unsanitized names people recognize.
const (
	AnnotationStepName  = "porter.dev/step-name"
	AnnotationBuildName = "porter.dev/build-name"
)

// maxNameLength keeps the pod name a valid DNS label, so it can also serve
// as the pod's hostname unchanged.
const maxNameLength = 63

// hashSuffixLength is how many hex digits of the SHA-256 of the original text
// replace what had to be cut off, so that two long names stay distinct.
const hashSuffixLength = 10

// Name is the name of the pod and of its Secret for a step.
func Name(stepID string) string {
	return "porter-" + dnsLabel(stepID, maxNameLength-len("porter-"))
}

// StepLabels are the labels on a step's pod and Secret.
func StepLabels(stepID, buildID, team, worker string) map[string]string {
	return map[string]string{
		LabelManagedBy: ManagedByPorter,
		LabelWorker:    LabelValue(worker),
		LabelBuild:     LabelValue(buildID),
		LabelStep:      LabelValue(stepID),
		LabelTeam:      LabelValue(team),
	}
}

// WorkerSelector selects every pod and Secret Porter created for a worker;
// it is the only thing the ATC lists or watches, so it never touches objects
// it does not own.
func WorkerSelector(worker string) string {
	return labels.Set{
		LabelManagedBy: ManagedByPorter,
		LabelWorker:    LabelValue(worker),
	}.String()
}

// BuildSelector selects the pods and Secrets of one build on a worker.
func BuildSelector(worker, buildID string) string {
	return labels.Set{
		LabelManagedBy: ManagedByPorter,
		LabelWorker:    LabelValue(worker),
		LabelBuild:     LabelValue(buildID),
	}.String()
}

// StepSelector selects the pod and Secret of one step on a worker.
func StepSelector(worker, stepID string) string {
	return labels.Set{
		LabelManagedBy: ManagedByPorter,
		LabelWorker:    LabelValue(worker),
		LabelStep:      LabelValue(stepID),
	}.String()
}

// LabelValue turns any text into a valid label value: at most 63 characters
// of [A-Za-z0-9-_.], starting and ending with an alphanumeric. Text that had
// to change keeps a hash of the original so distinct names stay distinct.
func LabelValue(s string) string {
	var b strings.Builder
	for _, r := range s {
		if isAlphanumeric(r) || r == '-' || r == '_' || r == '.' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	v := strings.TrimFunc(b.String(), func(r rune) bool { return !isAlphanumeric(r) })
	if v == s && len(v) <= maxNameLength {
		return v
	}
	if s == "" {
		return ""
	}
	return withHash(v, s, maxNameLength)
}

// dnsLabel turns text into a lowercase RFC 1123 label of at most max
// characters.
func dnsLabel(s string, max int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if isLowerAlphanumeric(r) || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	v := strings.Trim(b.String(), "-")
	if v == s && len(v) <= max && v != "" {
		return v
	}
	return withHash(v, s, max)
}

// withHash cuts clean to fit max together with a hash of original.
func withHash(clean, original string, max int) string {
	sum := sha256.Sum256([]byte(original))
	suffix := hex.EncodeToString(sum[:])[:hashSuffixLength]
	keep := max - len(suffix) - 1
	if len(clean) > keep {
		clean = clean[:keep]
	}
	clean = strings.TrimRight(clean, "-_.")
	if clean == "" {
		return suffix
	}
	return clean + "-" + suffix
}

func isAlphanumeric(r rune) bool {
	return isLowerAlphanumeric(r) || (r >= 'A' && r <= 'Z')
}

func isLowerAlphanumeric(r rune) bool {
	return (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9')
}

// checkPodPrefix starts the step ID of a check pod: a pod the ATC keeps
// for a while to run many checks in, each as a session (a job's step IDs
// start with "b<build id>-").
const checkPodPrefix = "checks-"

// CheckPodPlanID is the plan ID of a check pod's own container record;
// each check run in the pod has a record of its own, with its build's plan
// ID and the pod's step ID.
const CheckPodPlanID = "check-pod"

// CheckPodStepID is a new check pod's step ID; suffix makes it unique.
func CheckPodStepID(team, suffix string) string {
	return checkPodPrefix + dnsLabel(team, 20) + "-" + suffix
}

// IsCheckPod reports whether stepID is a check pod's, so that garbage
// collection deletes the pod only with the pod's own record.
func IsCheckPod(stepID string) bool { return strings.HasPrefix(stepID, checkPodPrefix) }
