package checkpods

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

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
	for i := range got {
		wg.Go(func() {
			id, err := p.Acquire(context.Background(), key, newID, create)
			if err != nil {
				t.Error(err)
			}
			got[i] = id
		})
	}
	time.Sleep(50 * time.Millisecond)
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
	if id, _ := p.Acquire(context.Background(), key, newID, create); id != "b" {
		t.Errorf("after half its lifetime: pod %q, want a new one", id)
	}
	connected = false
	if id, _ := p.Acquire(context.Background(), key, newID, create); id != "c" {
		t.Errorf("sidecar gone: pod %q, want a new one", id)
	}
	connected = true
	boom := errors.New("image cannot be pulled")
	if _, err := p.Acquire(context.Background(), Key{Team: "other"}, newID, func(string) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("failed creation: %v", err)
	}
	if id, err := p.Acquire(context.Background(), Key{Team: "other"}, newID, create); err != nil || id != "e" {
		t.Errorf("after a failed creation: %q %v, want a new pod", id, err)
	}
}
