package gc

import (
	"slices"
	"strings"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/podspec"
)

// Retention says which finished steps' pods stay, after Concourse's
// container GC (atc/gc, and the interceptible builds of atc/db): a pod
// holds one of the node's ~110 pod slots (and, while its keep-alive runs,
// its requests), so only those someone may still intercept stay.
type Retention struct {
	// Minimum keeps every finished build's pod but a check's for this long
	// after the build ended (--pod-retention: kubectl logs, a quick
	// intercept). Checks follow their own rule, whatever the minimum.
	Minimum time.Duration
	// OneOffGrace keeps a one-off build's pods (fly execute) after it ended
	// (Concourse's --gc-one-off-grace-period).
	OneOffGrace time.Duration
	// FailedGrace keeps the pods of a job's latest finished build, when it
	// did not succeed, for this long after it ended (Concourse's
	// --gc-failed-grace-period).
	FailedGrace time.Duration
	// HijackGrace keeps an intercepted pod this long after its last
	// session opened or closed; it stays anyway while one is open
	// (Concourse's --gc-hijack-grace-period).
	HijackGrace time.Duration
	// MaxKeptPerWorker caps the kept pods of a worker: beyond it the
	// oldest go first, whatever kept them (an open intercept session
	// last). 0: no cap.
	MaxKeptPerWorker int
	// CheckPodLifetime keeps a check pod (podspec.CheckPodPlanID) this
	// long after it was created: its keep-alive, which the ATC sets.
	CheckPodLifetime time.Duration
}

// Defaults, Concourse's where Concourse has one.
const (
	DefaultOneOffGrace      = 5 * time.Minute
	DefaultFailedGrace      = 120 * time.Hour
	DefaultHijackGrace      = 5 * time.Minute
	DefaultMaxKeptPerWorker = 50
)

// Why a finished step's pod is kept (the containers API's kept_reason and
// the porter_kept_pods gauge's reason label).
const (
	KeptLatestCheck = "latest-check"        // the latest check of its resource (fly intercept --check)
	KeptFailedBuild = "latest-failed-build" // its job's latest build, which did not succeed, within the failed grace period
	KeptOneOff      = "one-off"             // a one-off build within the one-off grace period
	KeptIntercepted = "intercepted"         // an intercept session is open, or closed within the hijack grace period
	KeptRetention   = "retention"           // within --pod-retention
	KeptCheckPod    = "check-pod"           // a check pod, within --check-pod-lifetime
	evictedOverCap  = "over the per-worker cap"
)

// KeptReasons are all the reasons, for metrics that show each one.
var KeptReasons = []string{KeptLatestCheck, KeptFailedBuild, KeptOneOff, KeptIntercepted, KeptRetention, KeptCheckPod}

// interceptSessionBound bounds how long an open session keeps a pod: a
// server that died with the session open never counts it closed.
const interceptSessionBound = 24 * time.Hour

// imageCheckPlanSuffix ends the plan id of a task image's check (pkg/atc/exec).
const imageCheckPlanSuffix = "/image-check"

// reason is why c's pod stays at now, or "" when it may go.
func (r Retention) reason(c db.FinishedContainer, now time.Time) string {
	if c.InterceptSessions > 0 && now.Sub(c.LastIntercept) < interceptSessionBound {
		return KeptIntercepted
	}
	if !c.LastIntercept.IsZero() && now.Sub(c.LastIntercept) < r.HijackGrace {
		return KeptIntercepted
	}
	age := now.Sub(c.Ended)
	switch {
	case c.State == concourse.ContainerWaiting:
		// Declared ahead and never given the go-ahead (a server that
		// crashed before it noted the pod): nothing ran in it.
		return ""
	case c.PlanID == podspec.CheckPodPlanID:
		if now.Sub(c.CreateTime) < r.CheckPodLifetime {
			return KeptCheckPod
		}
		return ""
	case c.Type == concourse.KindCheck && strings.HasSuffix(c.PlanID, imageCheckPlanSuffix):
		// An image's check reports its digest and is done: the task's
		// pod is the build's to intercept.
		return ""
	case c.Check:
		if c.LatestCheck {
			return KeptLatestCheck
		}
		return ""
	case c.JobBuild && c.LatestOfJob && c.BuildStatus != concourse.StatusSucceeded && (r.FailedGrace <= 0 || age < r.FailedGrace):
		return KeptFailedBuild
	case c.BuildID != 0 && !c.JobBuild && age < r.OneOffGrace:
		return KeptOneOff
	case age < r.Minimum:
		return KeptRetention
	}
	return ""
}

// decision is what one pass does with a finished step's pod.
type decision struct {
	c      db.FinishedContainer
	reason string // "" : the pod goes
	why    string // why it goes (logs)
}

// decide applies the rules and then the cap to a worker's finished
// containers (oldest end first, as db.FinishedContainers lists them).
func (r Retention) decide(cs []db.FinishedContainer, now time.Time) []decision {
	ds := make([]decision, len(cs))
	kept := 0
	for i, c := range cs {
		ds[i] = decision{c: c, reason: r.reason(c, now)}
		if ds[i].reason != "" && !onCheckPod(c) {
			kept++
		} else if ds[i].reason == "" {
			ds[i].why = "no longer retained"
		}
	}
	if r.MaxKeptPerWorker <= 0 || kept <= r.MaxKeptPerWorker {
		return ds
	}
	// Oldest first; pods with a session open only when nothing else is left.
	order := make([]int, 0, kept)
	for i, d := range ds {
		if d.reason != "" && !onCheckPod(d.c) {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		// A check pod serves the checks to come: it goes last, with the
		// pods someone is in.
		oa := ds[a].c.InterceptSessions > 0 || ds[a].c.PlanID == podspec.CheckPodPlanID
		ob := ds[b].c.InterceptSessions > 0 || ds[b].c.PlanID == podspec.CheckPodPlanID
		switch {
		case oa == ob:
			return 0
		case ob:
			return -1
		}
		return 1
	})
	for _, i := range order[:kept-r.MaxKeptPerWorker] {
		ds[i].reason, ds[i].why = "", evictedOverCap
	}
	return ds
}

// onCheckPod: a check run in a check pod. Its record keeps the pod
// reachable (fly intercept --check) while the rules keep it, but holds no
// pod of its own: it goes alone, and the pod with the pod's own record.
func onCheckPod(c db.FinishedContainer) bool {
	return podspec.IsCheckPod(c.StepID) && c.PlanID != podspec.CheckPodPlanID
}
