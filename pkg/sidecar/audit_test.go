package sidecar

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/redact"
)

// onceStore refuses to write a key twice, as the blobstore does for a Put
// with IfAbsent, and counts the requests made to it.
type onceStore struct {
	noArtifacts
	mu       sync.Mutex
	objects  map[string]string
	requests int
}

func (s *onceStore) PutAudit(_ context.Context, key string, body []byte, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	if _, ok := s.objects[key]; ok {
		return fmt.Errorf("put %s: %w", key, blobstore.ErrExists)
	}
	s.objects[key] = string(body)
	return nil
}

// A step's end stages its journal and result in one request each, and a
// restarted sidecar's second record leaves the first in place, without
// error: the record is written once.
func TestAuditObjectsAreStagedOnceInOneRequestEach(t *testing.T) {
	store := &onceStore{objects: map[string]string{}}
	a := &action.Action{StepID: "s1", StepName: "unit", Build: action.Build{ID: "1"}}
	first, err := newAuditTrail(t.TempDir(), a, "pod", store, redact.New(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer first.close()
	key, err := first.writeResult(t.Context(), &Result{Result: Succeeded})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(key, "/result.json") || store.requests != 2 || len(store.objects) != 2 {
		t.Fatalf("key %q after %d requests, objects %v: want result.json's, 2 requests, the journal and the result", key, store.requests, store.objects)
	}
	staged := map[string]string{}
	for k, v := range store.objects {
		staged[k] = v
	}

	again, err := newAuditTrail(t.TempDir(), a, "pod", store, redact.New(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer again.close()
	key2, err := again.writeResult(t.Context(), &Result{Result: Failed, ExitStatus: 1})
	if err != nil || key2 != key {
		t.Fatalf("second record: key %q, %v; want %q and no error", key2, err, key)
	}
	for k, v := range staged {
		if store.objects[k] != v {
			t.Errorf("%s was rewritten by the second record", k)
		}
	}
}
