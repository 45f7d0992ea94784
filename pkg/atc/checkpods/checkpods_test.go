package checkpods

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/porter-ci/porter/internal/eventually"
)

// watchedCtx counts the calls of Done: a check about to wait.
type watchedCtx struct {
	context.Context
	asked atomic.Int32
}

func (c *watchedCtx) Done() <-chan struct{} {
	c.asked.Add(1)
	return c.Context.Done()
}

// A pod runs at most MaxChecks checks at once: the next waits until one
// ends, or gives up with its context.
func TestPoolBoundsChecksPerPod(t *testing.T) {
	p := &Pool{Lifetime: time.Hour, MaxChecks: 2, Connected: func(string) bool { return true }}
	key := Key{Team: "main", Image: "mock"}
	newID := func() string { return "a" }
	create := func(string) error { return nil }
	first, err1 := p.Acquire(t.Context(), key, newID, create)
	second, err2 := p.Acquire(t.Context(), key, newID, create)
	if err := errors.Join(err1, err2); err != nil || first.StepID != "a" || second.StepID != "a" {
		t.Fatalf("two checks: %q %q %v", first.StepID, second.StepID, err)
	}
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Acquire(short, key, newID, create); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third check while two run: %v, want it to wait until its context ends", err)
	}
	got := make(chan Lease)
	waiting := &watchedCtx{Context: t.Context()}
	go func() {
		l, err := p.Acquire(waiting, key, newID, create)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	// Its second look at its context is its wait for a place in the pod
	// (the first is its wait for the pod).
	eventually.Within(t, 5*time.Second, func() error {
		if n := waiting.asked.Load(); n < 2 {
			return fmt.Errorf("the third check looked at its context %d times, want 2", n)
		}
		return nil
	})
	select {
	case <-got:
		t.Fatal("a third check ran while two did")
	default:
	}
	first.Release()
	select {
	case l := <-got:
		l.Release()
	case <-time.After(5 * time.Second):
		t.Fatal("a check ended, but the waiting one did not run")
	}
	second.Release()
}

// Checks that come while a pod is being created share it; a pod past half
// its lifetime, or whose sidecar went away, is replaced; a failed creation
// is every waiter's error and the next check tries again.
func TestPoolSharesReplacesAndRetries(t *testing.T) {
	now := time.Now()
	connected := true
	p := &Pool{Lifetime: 10 * time.Minute, Now: func() time.Time { return now }, Connected: func(string) bool { return connected }}
	key := Key{Team: "main", Image: "mock"}
	var created atomic.Int32
	ids := 0
	newID := func() string { ids++; return string(rune('a' + ids - 1)) }
	release := make(chan struct{})
	create := func(string) error { created.Add(1); <-release; return nil }

	var wg sync.WaitGroup
	got := make([]string, 5)
	waiting := &watchedCtx{Context: context.Background()}
	for i := range got {
		wg.Go(func() {
			l, err := p.Acquire(waiting, key, newID, create)
			if err != nil {
				t.Error(err)
			}
			got[i] = l.StepID
		})
	}
	// One check creates the pod; the four others wait for it.
	eventually.Within(t, 5*time.Second, func() error {
		if c, n := created.Load(), waiting.asked.Load(); c != 1 || n < 4 {
			return fmt.Errorf("%d pods being created and %d checks waiting, want 1 and 4", c, n)
		}
		return nil
	})
	close(release)
	wg.Wait()
	for _, id := range got {
		if id != "a" {
			t.Fatalf("checks got pods %v, want all %q", got, "a")
		}
	}
	if created.Load() != 1 {
		t.Fatalf("created %d pods, want 1", created.Load())
	}

	now = now.Add(6 * time.Minute) // past half its lifetime
	if l, _ := p.Acquire(context.Background(), key, newID, create); l.StepID != "b" {
		t.Errorf("after half its lifetime: pod %q, want a new one", l.StepID)
	}
	connected = false
	if l, _ := p.Acquire(context.Background(), key, newID, create); l.StepID != "c" {
		t.Errorf("sidecar gone: pod %q, want a new one", l.StepID)
	}
	connected = true
	boom := errors.New("image cannot be pulled")
	if _, err := p.Acquire(context.Background(), Key{Team: "other"}, newID, func(string) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("failed creation: %v", err)
	}
	if l, err := p.Acquire(context.Background(), Key{Team: "other"}, newID, create); err != nil || l.StepID != "e" {
		t.Errorf("after a failed creation: %q %v, want a new pod", l.StepID, err)
	}
}

// Two pipelines of one team never share a check pod, and a retired pod
// (one a person intercepted) takes no new check: the next one makes a new
// pod, while the lease already given keeps its pod.
func TestPoolSeparatesPipelinesAndRetires(t *testing.T) {
	p := &Pool{Lifetime: time.Hour, Connected: func(string) bool { return true }}
	n := 0
	newID := func() string { n++; return fmt.Sprintf("pod-%d", n) }
	create := func(string) error { return nil }
	acquire := func(key Key) Lease {
		t.Helper()
		l, err := p.Acquire(t.Context(), key, newID, create)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := Key{Team: "main", Pipeline: 1, Image: "mock"}, Key{Team: "main", Pipeline: 2, Image: "mock"}
	la, lb := acquire(a), acquire(b)
	if la.StepID == lb.StepID {
		t.Fatalf("pipelines 1 and 2 share check pod %s", la.StepID)
	}
	if again := acquire(a); again.StepID != la.StepID {
		t.Fatalf("pipeline 1's second check: pod %s, want its pod %s", again.StepID, la.StepID)
	}
	if !p.Retire(la.StepID) {
		t.Fatalf("Retire(%s): the pod was not in the pool", la.StepID)
	}
	if p.Retire(la.StepID) {
		t.Fatal("Retire of a retired pod reported it in the pool")
	}
	if next := acquire(a); next.StepID == la.StepID || next.StepID == lb.StepID {
		t.Fatalf("after its pod was retired, pipeline 1's check got pod %s", next.StepID)
	}
	if other := acquire(b); other.StepID != lb.StepID {
		t.Fatalf("retiring pipeline 1's pod moved pipeline 2's checks to %s", other.StepID)
	}
}

// A check that waits for a pod another check is creating does not take
// that check's error when the other check's build ends (aborted, timed
// out) mid-creation: it creates the pod itself and runs.
func TestPoolWaiterOutlivesAnAbandonedCreation(t *testing.T) {
	p := &Pool{Lifetime: time.Hour, Connected: func(string) bool { return true }}
	key := Key{Team: "main", Image: "mock"}
	n := 0
	var mu sync.Mutex
	newID := func() string { mu.Lock(); defer mu.Unlock(); n++; return fmt.Sprintf("pod-%d", n) }
	creatorCtx, timeOut := context.WithCancelCause(t.Context())
	creating := make(chan struct{})
	creatorErr := make(chan error, 1)
	go func() {
		_, err := p.Acquire(creatorCtx, key, newID, func(string) error {
			close(creating)
			<-creatorCtx.Done()
			return fmt.Errorf("check pod: %w", context.Cause(creatorCtx))
		})
		creatorErr <- err
	}()
	<-creating
	waiting := &watchedCtx{Context: t.Context()}
	got := make(chan error, 1)
	var lease Lease
	go func() {
		var err error
		lease, err = p.Acquire(waiting, key, newID, func(string) error { return nil })
		got <- err
	}()
	eventually.Within(t, 5*time.Second, func() error {
		if waiting.asked.Load() < 1 {
			return errors.New("the second check does not wait for the pod yet")
		}
		return nil
	})
	timedOut := errors.New("check timed out after 3s")
	timeOut(timedOut)
	if err := <-creatorErr; !errors.Is(err, timedOut) {
		t.Fatalf("the creating check: %v, want its own timeout", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiting check took the other build's error: %v", err)
		}
		if lease.StepID != "pod-2" {
			t.Fatalf("the waiting check got pod %q, want the new pod-2", lease.StepID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting check still waits after the creation was abandoned")
	}
}
