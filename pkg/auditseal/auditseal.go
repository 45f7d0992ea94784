// Package auditseal moves a step's audit record from where the step may
// write it (its staging prefix in the artifacts' bucket) into the audit
// trail, which only the server writes, each object once. A step's
// credentials thus never reach the audit bucket, and a plain S3 read of
// the trail returns what the server accepted.
package auditseal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/porter-ci/porter/pkg/blobstore"
)

// StagingPrefix is where step stepID stages its audit objects, in the
// artifacts' bucket, until the server seals them into the audit trail:
// the step's credentials write nothing in the audit bucket.
func StagingPrefix(stepID string) string { return "audit-staging/" + stepID + "/" }

// StagedKey is where step stepID stages the audit object name of its
// blobstore.StepPrefix(auditID, stepID): under its staging prefix, by its
// final key, so that sealing needs only the step's ID. A step's
// credentials reach only StagedKey(its audit ID, its ID, *): a staged key
// cannot name another step's record.
func StagedKey(auditID, stepID, name string) string {
	return StagingPrefix(stepID) + blobstore.StepPrefix(auditID, stepID) + name
}

// Sealer writes what a step staged (StagedKey) into the audit
// trail once the step has ended. A step's credentials grant nothing in the
// audit bucket: only the server, with the store's own key, writes there,
// each object once. Whatever a step's credentials write after the seal
// stays in staging, and nothing but the objects a step stages is sealed.
type Sealer struct {
	// Staging is where steps stage their audit objects: the artifacts'
	// bucket.
	Staging blobstore.Store
	// Audit is the audit trail's bucket.
	Audit blobstore.Store
}

// Sealed is what one Seal did.
type Sealed struct {
	// Keys are the audit keys written now (not those sealed before).
	Keys []string
	// Ignored are staged keys that are none of the step's audit objects;
	// they are deleted, not sealed.
	Ignored []string
}

// Seal moves step stepID's staged audit objects into the audit trail
// under their final keys: action.json and events.jsonl.zst, then
// result.json, whose presence marks a record complete. Each is written
// only where the audit trail has no object yet (If-None-Match), and its
// staged copy is deleted once it is sealed, so Seal may run again,
// concurrently too, and after an interrupted run it finishes the job. It stops at the first
// failed write and returns the error: a later Seal takes it up.
func (s Sealer) Seal(ctx context.Context, stepID string) (Sealed, error) {
	var res Sealed
	prefix := StagingPrefix(stepID)
	staged, err := s.Staging.List(ctx, prefix)
	if err != nil {
		return res, fmt.Errorf("list the staged audit of step %s: %w", stepID, err)
	}
	type object struct {
		staged, final string
		rank          int
	}
	var objs []object
	var done []string // staged keys to delete
	for _, o := range staged {
		final := strings.TrimPrefix(o.Key, prefix)
		rank := stagedRank(final, stepID)
		if rank < 0 {
			res.Ignored = append(res.Ignored, o.Key)
			done = append(done, o.Key)
			continue
		}
		objs = append(objs, object{staged: o.Key, final: final, rank: rank})
	}
	// result.json marks a record complete, so it is sealed after the
	// others, which are sealed at once: a step's end waits on this.
	last := func(o object) bool { return o.rank == rankResult }
	var mu sync.Mutex
	sealAll := func(objs []object) error {
		g, gctx := errgroup.WithContext(ctx)
		for _, o := range objs {
			g.Go(func() error {
				written, err := s.sealOne(gctx, o.staged, o.final)
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if written {
					res.Keys = append(res.Keys, o.final)
				}
				done = append(done, o.staged)
				return nil
			})
		}
		return g.Wait()
	}
	if err := sealAll(slices.DeleteFunc(slices.Clone(objs), last)); err != nil {
		return res, err
	}
	if err := sealAll(slices.DeleteFunc(objs, func(o object) bool { return !last(o) })); err != nil {
		return res, err
	}
	errs := make([]error, len(done))
	var wg sync.WaitGroup
	for i, key := range done {
		wg.Go(func() {
			if err := s.Staging.Delete(ctx, key); err != nil {
				errs[i] = fmt.Errorf("delete staged audit object %s: %w", key, err)
			}
		})
	}
	wg.Wait()
	return res, errors.Join(errs...)
}

// sealOne copies one staged object to its final key unless that is taken;
// written says whether this call wrote it.
func (s Sealer) sealOne(ctx context.Context, staged, final string) (bool, error) {
	rc, info, err := s.Staging.Get(ctx, staged)
	if errors.Is(err, blobstore.ErrNotFound) {
		// Another seal of the same step took it.
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read staged audit object %s: %w", staged, err)
	}
	defer rc.Close()
	_, err = s.Audit.Put(ctx, final, rc, info.Size, blobstore.PutOptions{ContentType: info.ContentType, IfAbsent: true})
	switch {
	case errors.Is(err, blobstore.ErrExists):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("seal audit object %s: %w", final, err)
	}
	return true, nil
}

// stagedRank is the sealing order of the staged object whose final key is
// final, or -1 if it is none of the objects a step stages: one of
// builds/<audit id>/steps/<stepID>/{action.json,events.jsonl.zst,result.json}.
// pod.yaml and build.json are the server's own.
func stagedRank(final, stepID string) int {
	rest, ok := strings.CutPrefix(final, blobstore.AuditTrailPrefix)
	if !ok {
		return -1
	}
	auditID, rest, ok := strings.Cut(rest, "/")
	if !ok || auditID == "" {
		return -1
	}
	name, ok := strings.CutPrefix(rest, "steps/"+stepID+"/")
	if !ok {
		return -1
	}
	switch name {
	case blobstore.ActionObject, blobstore.EventsObject:
		return 0
	case blobstore.ResultObject:
		return rankResult
	}
	return -1
}

// rankResult is result.json's rank: sealed last, as it marks the record
// complete.
const rankResult = 1
