// Package parallel runs a step's substeps at once, a bounded number at a
// time: in_parallel's steps and across's runs.
package parallel

import (
	"context"
	"errors"
	"sync"
)

// errFailFast stops the other runs once one failed, with fail_fast.
var errFailFast = errors.New("another step of the in_parallel failed")

// Run runs f(0..n-1), at most limit at a time (0: all at once), and says
// whether all succeeded, with their errors joined; with failFast the first
// failure or error stops the others (their contexts end) and keeps the
// rest from starting. It returns once every f it started has returned.
// When ctx ends, the error is ctx's cause.
func Run(ctx context.Context, n, limit int, failFast bool, f func(context.Context, int) (bool, error)) (bool, error) {
	if limit <= 0 || limit > n {
		limit = n
	}
	pctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	sem := make(chan struct{}, max(limit, 1))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ok   = true
		errs []error
	)
	for i := 0; i < n; i++ {
		select {
		case sem <- struct{}{}:
		case <-pctx.Done():
		}
		if pctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			stepOK, err := f(pctx, i)
			mu.Lock()
			defer mu.Unlock()
			ok = ok && stepOK
			if err != nil && !errors.Is(err, errFailFast) {
				errs = append(errs, err)
			}
			if failFast && (!stepOK || err != nil) {
				stop(errFailFast)
			}
		}(i)
	}
	wg.Wait()
	if ctx.Err() != nil {
		if cause := context.Cause(ctx); cause != nil {
			return false, cause
		}
		return false, ctx.Err()
	}
	if pctx.Err() != nil {
		// Runs that fail_fast kept from starting did not succeed.
		ok = false
	}
	return ok, errors.Join(errs...)
}
