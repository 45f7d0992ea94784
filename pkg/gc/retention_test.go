package gc

import (
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/podspec"
)

func TestRetentionReasons(t *testing.T) {
	now := time.Now()
	r := Retention{Minimum: time.Minute, OneOffGrace: 5 * time.Minute, FailedGrace: time.Hour, HijackGrace: 5 * time.Minute}
	fc := func(mod func(*db.FinishedContainer)) db.FinishedContainer {
		c := db.FinishedContainer{Container: db.Container{Handle: "h", BuildID: 1, Type: "task"}, BuildStatus: "succeeded", Ended: now.Add(-10 * time.Minute)}
		mod(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		c    db.FinishedContainer
		want string
	}{
		{"the latest check", fc(func(c *db.FinishedContainer) { c.Type, c.Check, c.LatestCheck = "check", true, true }), KeptLatestCheck},
		{"an earlier check, even within the minimum", fc(func(c *db.FinishedContainer) { c.Type, c.Check, c.Ended = "check", true, now }), ""},
		{"an image check", fc(func(c *db.FinishedContainer) {
			c.Type, c.PlanID, c.JobBuild, c.LatestOfJob, c.BuildStatus = "check", "3/image-check", true, true, "failed"
		}), ""},
		{"a job's latest build, failed", fc(func(c *db.FinishedContainer) { c.JobBuild, c.LatestOfJob, c.BuildStatus = true, true, "failed" }), KeptFailedBuild},
		{"a job's latest build, errored, past the grace", fc(func(c *db.FinishedContainer) {
			c.JobBuild, c.LatestOfJob, c.BuildStatus, c.Ended = true, true, "errored", now.Add(-2*time.Hour)
		}), ""},
		{"a job's latest build, succeeded (Concourse keeps none)", fc(func(c *db.FinishedContainer) { c.JobBuild, c.LatestOfJob = true, true }), ""},
		{"a job's earlier build, failed", fc(func(c *db.FinishedContainer) { c.JobBuild, c.BuildStatus = true, "failed" }), ""},
		{"a job's build within the minimum", fc(func(c *db.FinishedContainer) { c.JobBuild, c.Ended = true, now.Add(-30*time.Second) }), KeptRetention},
		{"a one-off within its grace", fc(func(c *db.FinishedContainer) { c.Ended = now.Add(-4 * time.Minute) }), KeptOneOff},
		{"a one-off past its grace", fc(func(c *db.FinishedContainer) {}), ""},
		{"a pod declared ahead and never started, in its build's grace", fc(func(c *db.FinishedContainer) {
			c.State, c.Ended = concourse.ContainerWaiting, now.Add(-time.Second)
		}), ""},
		{"intercepted, session open", fc(func(c *db.FinishedContainer) { c.InterceptSessions, c.LastIntercept = 1, now.Add(-time.Hour) }), KeptIntercepted},
		{"intercepted within the hijack grace", fc(func(c *db.FinishedContainer) { c.LastIntercept = now.Add(-time.Minute) }), KeptIntercepted},
		{"intercepted long ago", fc(func(c *db.FinishedContainer) { c.LastIntercept = now.Add(-time.Hour) }), ""},
		{"a session left open by a dead server", fc(func(c *db.FinishedContainer) { c.InterceptSessions, c.LastIntercept = 1, now.Add(-48*time.Hour) }), ""},
	} {
		if got := r.reason(tc.c, now); got != tc.want {
			t.Errorf("%s: kept %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRetentionCapEvictsOldestFirstAndOpenSessionsLast(t *testing.T) {
	now := time.Now()
	r := Retention{OneOffGrace: time.Hour, MaxKeptPerWorker: 2}
	var cs []db.FinishedContainer
	for i, h := range []string{"a", "b", "c", "d"} {
		c := db.FinishedContainer{Container: db.Container{Handle: h, BuildID: int64(i + 1), Type: "task"}, Ended: now.Add(time.Duration(i-10) * time.Minute)}
		if h == "a" {
			c.InterceptSessions, c.LastIntercept = 1, now
		}
		cs = append(cs, c)
	}
	got := map[string]string{}
	for _, d := range r.decide(cs, now) {
		got[d.c.Handle] = d.reason + "/" + d.why
	}
	want := map[string]string{"a": KeptIntercepted + "/", "b": "/" + evictedOverCap, "c": "/" + evictedOverCap, "d": KeptOneOff + "/"}
	for h, w := range want {
		if got[h] != w {
			t.Errorf("%s: %q, want %q", h, got[h], w)
		}
	}
}

func TestCollectKeepsByRuleAndShrinksRunningKeptPods(t *testing.T) {
	now := time.Now()
	running := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: podspec.StepLabels(name, "1", "main", "w"), CreationTimestamp: metav1.NewTime(now)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: podspec.StepContainerName, Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	kube := fake.NewClientset(running(podspec.Name("old")), running(podspec.Name("new")))
	store := &fakeStore{
		containers: []db.Container{{Handle: "old", WorkerName: "w", StepID: "old"}, {Handle: "new", WorkerName: "w", StepID: "new"}},
		finished: []db.FinishedContainer{
			{Container: db.Container{Handle: "old", WorkerName: "w", StepID: "old", Type: "check", BuildID: 1}, Check: true, Ended: now.Add(-time.Minute)},
			{Container: db.Container{Handle: "new", WorkerName: "w", StepID: "new", Type: "check", BuildID: 2}, Check: true, LatestCheck: true, Ended: now},
		},
	}
	c := New(Config{Retention: Retention{Minimum: time.Hour, MaxKeptPerWorker: 10}}, store, &fakeBlobs{},
		func() []Worker { return []Worker{{Name: "w", Namespace: "ns", Kube: kube}} }, slog.New(slog.DiscardHandler))
	c.Now = func() time.Time { return now }
	res, err := c.CollectPods(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.Pods != 1 || len(store.deleted) != 1 || store.deleted[0] != "old" {
		t.Errorf("deleted pods %d, records %v: want the earlier check's only", res.Pods, store.deleted)
	}
	if res.Kept[KeptLatestCheck] != 1 || store.reasons["new"] != KeptLatestCheck {
		t.Errorf("kept %v, reasons %v", res.Kept, store.reasons)
	}
	if res.Resized != 1 {
		t.Errorf("resized %d, want 1", res.Resized)
	}
	var sawResize bool
	for _, a := range kube.Actions() {
		if a.GetSubresource() == "resize" {
			sawResize = true
		}
	}
	if !sawResize {
		t.Error("no pods/resize call")
	}
}

func TestCollectDeletesAKeptPodThatHasEnded(t *testing.T) {
	now := time.Now()
	ended := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podspec.Name("aborted"), Namespace: "ns", Labels: podspec.StepLabels("aborted", "1", "main", "w"), CreationTimestamp: metav1.NewTime(now)},
		Status:     corev1.PodStatus{Phase: corev1.PodFailed},
	}
	kube := fake.NewClientset(ended)
	// The job's latest build, aborted a moment ago: kept by the rules for
	// the failed grace period, but its pod has nothing left to intercept.
	store := &fakeStore{
		containers: []db.Container{{Handle: "aborted", WorkerName: "w", StepID: "aborted"}},
		finished: []db.FinishedContainer{{Container: db.Container{Handle: "aborted", WorkerName: "w", StepID: "aborted", Type: "task", BuildID: 1},
			JobBuild: true, LatestOfJob: true, BuildStatus: "aborted", Ended: now}},
	}
	c := New(Config{Retention: Retention{Minimum: time.Hour, FailedGrace: time.Hour, MaxKeptPerWorker: 10}}, store, &fakeBlobs{},
		func() []Worker { return []Worker{{Name: "w", Namespace: "ns", Kube: kube}} }, slog.New(slog.DiscardHandler))
	c.Now = func() time.Time { return now }
	res, err := c.CollectPods(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.Pods != 1 || len(store.deleted) != 1 {
		t.Fatalf("deleted pods %d, records %v: want the ended pod gone", res.Pods, store.deleted)
	}
}

// A check pod serves many checks, each with a record of its own on it: an
// earlier check's record goes alone, the latest check's stays (fly
// intercept --check), and the pod goes only with its own record, at the
// end of its lifetime.
func TestCollectKeepsACheckPodForItsLifetimeAndDropsOnlyItsChecksRecords(t *testing.T) {
	now := time.Now()
	pool := podspec.CheckPodStepID("main", "abc")
	running := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podspec.Name(pool), Namespace: "ns", Labels: podspec.StepLabels(pool, "1", "main", "w"), CreationTimestamp: metav1.NewTime(now)},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	kube := fake.NewClientset(running)
	onPod := func(handle string, build int64, latest bool) db.FinishedContainer {
		return db.FinishedContainer{Container: db.Container{Handle: handle, WorkerName: "w", StepID: pool, PodName: podspec.Name(pool), Type: "check", BuildID: build, PlanID: "1"},
			Check: true, LatestCheck: latest, Ended: now.Add(-time.Minute)}
	}
	podRecord := db.FinishedContainer{Container: db.Container{Handle: "pod", WorkerName: "w", StepID: pool, PodName: podspec.Name(pool), Type: "check", BuildID: 1,
		PlanID: podspec.CheckPodPlanID, CreateTime: now.Add(-2 * time.Minute)}, Check: true, Ended: now.Add(-2 * time.Minute)}
	store := &fakeStore{
		containers: []db.Container{podRecord.Container},
		finished:   []db.FinishedContainer{podRecord, onPod("earlier", 2, false), onPod("latest", 3, true)},
	}
	// A cap of 1 that the checks' records must not count against.
	c := New(Config{Retention: Retention{Minimum: time.Hour, MaxKeptPerWorker: 1, CheckPodLifetime: 10 * time.Minute}}, store, &fakeBlobs{},
		func() []Worker { return []Worker{{Name: "w", Namespace: "ns", Kube: kube}} }, slog.New(slog.DiscardHandler))
	c.Now = func() time.Time { return now }
	res, err := c.CollectPods(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.Pods != 0 || len(store.deleted) != 1 || store.deleted[0] != "earlier" {
		t.Fatalf("deleted pods %d, records %v: want only the earlier check's record", res.Pods, store.deleted)
	}
	if store.reasons["pod"] != KeptCheckPod || store.reasons["latest"] != "" || res.Kept[KeptCheckPod] != 1 || res.KeptByWorker["w"] != 1 {
		t.Errorf("reasons %v, kept %v by worker %v", store.reasons, res.Kept, res.KeptByWorker)
	}

	// Past its lifetime the pod goes, with its record.
	c.Now = func() time.Time { return now.Add(20 * time.Minute) }
	store.finished = []db.FinishedContainer{podRecord}
	store.deleted = nil
	if res, err = c.CollectPods(t.Context()); err != nil {
		t.Fatal(err)
	}
	if res.Pods != 1 || len(store.deleted) != 1 || store.deleted[0] != "pod" {
		t.Errorf("deleted pods %d, records %v: want the expired check pod", res.Pods, store.deleted)
	}
}

// A worker with a watch's cache is collected from it: a pass makes no
// list request, and a cache that has not synced falls back to one.
func TestCollectReadsPodsFromTheWatchCache(t *testing.T) {
	now := time.Now()
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: podspec.StepLabels(name, "1", "main", "w"), CreationTimestamp: metav1.NewTime(now)},
			Status:     corev1.PodStatus{Phase: corev1.PodSucceeded},
		}
	}
	for _, synced := range []bool{true, false} {
		old := pod(podspec.Name("old"))
		kube := fake.NewClientset(old)
		store := &fakeStore{
			containers: []db.Container{{Handle: "old", WorkerName: "w", StepID: "old"}},
			finished: []db.FinishedContainer{
				{Container: db.Container{Handle: "old", WorkerName: "w", StepID: "old", Type: "task", BuildID: 1}, Ended: now.Add(-time.Hour)},
			},
		}
		cached := func() ([]*corev1.Pod, bool) { return []*corev1.Pod{old}, synced }
		c := New(Config{Retention: Retention{Minimum: time.Minute}}, store, &fakeBlobs{},
			func() []Worker { return []Worker{{Name: "w", Namespace: "ns", Kube: kube, Pods: cached}} }, slog.New(slog.DiscardHandler))
		c.Now = func() time.Time { return now }
		res, err := c.CollectPods(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if res.Pods != 1 || len(store.deleted) != 1 {
			t.Errorf("synced %v: deleted pods %d, records %v: want the finished step's", synced, res.Pods, store.deleted)
		}
		lists := 0
		for _, a := range kube.Actions() {
			if a.GetVerb() == "list" {
				lists++
			}
		}
		if want := map[bool]int{true: 0, false: 1}[synced]; lists != want {
			t.Errorf("synced %v: %d list requests, want %d", synced, lists, want)
		}
	}
}

// A finished step's pod older than the orphan grace is deleted once: the
// pass's pod list still shows it after its record went, and it must not
// be taken for an orphan and deleted again (with its Secret).
func TestCollectDeletesAFinishedPodOnce(t *testing.T) {
	now := time.Now()
	old := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podspec.Name("old"), Namespace: "ns", Labels: podspec.StepLabels("old", "1", "main", "w"), CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Status:     corev1.PodStatus{Phase: corev1.PodSucceeded},
	}
	kube := fake.NewClientset(old)
	store := &fakeStore{
		containers: []db.Container{{Handle: "old", WorkerName: "w", StepID: "old"}},
		finished: []db.FinishedContainer{
			{Container: db.Container{Handle: "old", WorkerName: "w", StepID: "old", Type: "task", BuildID: 1}, Ended: now.Add(-time.Hour)},
		},
	}
	cached := func() ([]*corev1.Pod, bool) { return []*corev1.Pod{old}, true }
	c := New(Config{Retention: Retention{Minimum: time.Minute}, OrphanGrace: time.Minute}, store, &fakeBlobs{},
		func() []Worker { return []Worker{{Name: "w", Namespace: "ns", Kube: kube, Pods: cached}} }, slog.New(slog.DiscardHandler))
	c.Now = func() time.Time { return now }
	res, err := c.CollectPods(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.Pods != 1 || res.OrphanPods != 0 || len(store.deleted) != 1 {
		t.Errorf("deleted pods %d, orphans %d, records %v: want the finished step's pod, no orphan", res.Pods, res.OrphanPods, store.deleted)
	}
	deletes := map[string]int{}
	for _, a := range kube.Actions() {
		if a.GetVerb() == "delete" {
			deletes[a.GetResource().Resource]++
		}
	}
	if deletes["pods"] != 1 || deletes["secrets"] != 1 {
		t.Errorf("delete requests %v: want one for the pod and one for its Secret", deletes)
	}
}
