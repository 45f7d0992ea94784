package gc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/podspec"
)

// The selection logic with fakes; test/gc proves it on the real cluster,
// MinIO and PostgreSQL.

type fakeStore struct {
	locked     bool
	containers []db.Container
	finished   []db.FinishedContainer
	reasons    map[string]string
	deleted    []string
}

func (f *fakeStore) TryLock(context.Context, db.LockID) (func(), bool, error) {
	return func() {}, !f.locked, nil
}
func (f *fakeStore) Containers(context.Context, db.ContainerFilter) ([]db.Container, error) {
	return f.containers, nil
}
func (f *fakeStore) FinishedContainers(context.Context, string) ([]db.FinishedContainer, error) {
	return f.finished, nil
}
func (f *fakeStore) SetKeptReason(_ context.Context, h, r string) error {
	if f.reasons == nil {
		f.reasons = map[string]string{}
	}
	f.reasons[h] = r
	return nil
}
func (f *fakeStore) DeleteContainer(_ context.Context, h string) error {
	f.deleted = append(f.deleted, h)
	f.containers = slices.DeleteFunc(f.containers, func(c db.Container) bool { return c.Handle == h })
	return nil
}
func (f *fakeStore) MoveContainerState(_ context.Context, h string, from, to concourse.ContainerState) (bool, error) {
	for i, c := range f.containers {
		if c.Handle == h && c.State == from {
			f.containers[i].State = to
			return true, nil
		}
	}
	return false, nil
}
func (f *fakeStore) DeleteExpiredResourceCaches(context.Context, time.Time) (int64, error) {
	return 0, nil
}
func (f *fakeStore) ExpiredArtifacts(context.Context, time.Time) ([]db.Artifact, error) {
	return nil, nil
}
func (f *fakeStore) DeleteExpiredArtifact(context.Context, int64, time.Time) (bool, bool, error) {
	return false, false, nil
}
func (f *fakeStore) ArtifactKeyReferenced(context.Context, string, time.Time) (bool, error) {
	return false, nil
}
func (f *fakeStore) ReferencedArtifactKeys(context.Context, time.Time) (map[string]bool, error) {
	return nil, nil
}
func (f *fakeStore) UnreferencedEventObjects(context.Context, int) ([]string, error) {
	return nil, nil
}
func (f *fakeStore) ForgetEventObject(context.Context, string) error          { return nil }
func (f *fakeStore) JobLogConfigs(context.Context) ([]db.JobLogConfig, error) { return nil, nil }
func (f *fakeStore) LoggedBuilds(context.Context, int64) ([]db.LoggedBuild, error) {
	return nil, nil
}
func (f *fakeStore) ReapBuildLogs(context.Context, []int64) (int64, error) { return 0, nil }

type fakeBlobs struct {
	objs    []blobstore.ObjectInfo
	failOn  string
	deleted []string
}

func (f *fakeBlobs) List(_ context.Context, prefix string) ([]blobstore.ObjectInfo, error) {
	var out []blobstore.ObjectInfo
	for _, o := range f.objs {
		if strings.HasPrefix(o.Key, prefix) {
			out = append(out, o)
		}
	}
	return out, nil
}
func (f *fakeBlobs) Get(context.Context, string) (io.ReadCloser, blobstore.ObjectInfo, error) {
	return nil, blobstore.ObjectInfo{}, errors.New("not used by these tests")
}
func (f *fakeBlobs) Delete(_ context.Context, key string) error {
	if key == f.failOn {
		return errors.New("boom")
	}
	f.deleted = append(f.deleted, key)
	return nil
}

func pod(name string, labels map[string]string, created time.Time) runtime.Object {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels, CreationTimestamp: metav1.NewTime(created)}}
}

func TestOrphanPodsOnlyPortersOldAndUnknown(t *testing.T) {
	now := time.Now()
	old := now.Add(-time.Hour)
	otherWorker := podspec.StepLabels("x", "1", "main", "other")
	noManaged := podspec.StepLabels("y", "1", "main", "w")
	delete(noManaged, podspec.LabelManagedBy)
	kube := fake.NewClientset(
		pod("porter-orphan", podspec.StepLabels("orphan", "1", "main", "w"), old),
		pod("porter-young", podspec.StepLabels("young", "1", "main", "w"), now.Add(-10*time.Second)),
		pod("porter-known", podspec.StepLabels("known", "1", "main", "w"), old),
		pod("porter-other-worker", otherWorker, old),
		pod("not-porter", map[string]string{"app": "x"}, old),
		pod("almost-porter", noManaged, old),
	)
	store := &fakeStore{containers: []db.Container{{Handle: "h", WorkerName: "w", StepID: "known", PodName: podspec.Name("known")}}}
	c := New(Config{}, store, &fakeBlobs{}, func() []Worker { return []Worker{{Name: "w", Namespace: "ns", Kube: kube}} }, slog.New(slog.DiscardHandler))
	c.Now = func() time.Time { return now }
	res, err := c.Collect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.OrphanPods != 1 {
		t.Errorf("orphan pods deleted: %d, want 1", res.OrphanPods)
	}
	var deleted []string
	for _, a := range kube.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok && a.GetResource().Resource == "pods" {
			deleted = append(deleted, d.GetName())
		}
	}
	if !slices.Equal(deleted, []string{"porter-orphan"}) {
		t.Errorf("deleted pods %v, want only porter-orphan", deleted)
	}
}

func TestOneFailureDoesNotStopThePass(t *testing.T) {
	now := time.Now()
	blobs := &fakeBlobs{failOn: "staging/a.tar.zst", objs: []blobstore.ObjectInfo{
		{Key: "staging/a.tar.zst", Size: 1, LastModified: now.Add(-2 * time.Hour)},
		{Key: "staging/b.tar.zst", Size: 2, LastModified: now.Add(-2 * time.Hour)},
		{Key: "staging/c.tar.zst", Size: 4, LastModified: now.Add(-time.Minute)},
	}}
	c := New(Config{}, &fakeStore{}, blobs, nil, slog.New(slog.DiscardHandler))
	c.Now = func() time.Time { return now }
	res, err := c.Collect(t.Context())
	if err == nil || !strings.Contains(err.Error(), "staging/a.tar.zst") {
		t.Errorf("error %v, want the failed object named", err)
	}
	if res.StagingObjects != 1 || res.StagingBytes != 2 || !slices.Equal(blobs.deleted, []string{"staging/b.tar.zst"}) {
		t.Errorf("result %+v, deleted %v: want only b", res, blobs.deleted)
	}
}

func TestLockHeldElsewhereSkips(t *testing.T) {
	blobs := &fakeBlobs{objs: []blobstore.ObjectInfo{{Key: "staging/a.tar.zst", LastModified: time.Now().Add(-2 * time.Hour)}}}
	c := New(Config{}, &fakeStore{locked: true}, blobs, nil, slog.New(slog.DiscardHandler))
	res, err := c.CollectLocked(t.Context())
	if err != nil || !res.SkippedNotLeader || len(blobs.deleted) != 0 {
		t.Errorf("with the lock held elsewhere: %+v %v, deleted %v", res, err, blobs.deleted)
	}
}

func TestPrefixesMatchTheLayout(t *testing.T) {
	m := blobstore.ManifestKey("main", "sha256:ab")
	if !strings.HasPrefix(blobstore.NewBlobKey("main", "step"), blobPrefix) || !strings.HasPrefix(m, artifactPrefix) || !blobstore.IsManifestKey(m) {
		t.Fatal("pkg/blobstore's layout moved: update the GC prefixes")
	}
}
