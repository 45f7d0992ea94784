package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/test/bench/internal/benchstat"
)

// stepGaps is where a serial job's time goes between one step's process
// and the next's, from the phases each step's sidecar recorded in its
// audit record (result.json): the step's own end, the hand-over (the
// sidecar's report, the server's seal and records, the next go-ahead),
// and the next step's start.
type stepGaps struct {
	exitToFinished  []time.Duration // process exited → sidecar finished (outputs, status)
	finishedToTurn  []time.Duration // sidecar finished → next step's go-ahead arrived
	turnToRunning   []time.Duration // go-ahead arrived → process started
	runningToExited []time.Duration // process started → exited (`true`)
	// ready counts the steps after the first whose pods were waiting for
	// their turn when it came (declared ahead and started in time), of
	// turns.
	ready, turns int
}

// add reads build id's audit record and adds its steps' gaps, in the
// order the steps ran.
func (g *stepGaps) add(ctx context.Context, url, token string, id int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/builds/%d/audit", url, id), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return fmt.Errorf("audit of build %d: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("audit of build %d: %s", id, resp.Status)
	}
	var audit struct {
		Steps map[string]api.StepRecord `json:"steps"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&audit); err != nil {
		return fmt.Errorf("audit of build %d: %w", id, err)
	}
	type step struct{ waiting, turn, running, exited, finished time.Time }
	var steps []step
	for sid, rec := range audit.Steps {
		var s step
		for _, p := range rec.Phases {
			switch p.Name {
			case api.PhaseWaitingForTurn:
				s.waiting = p.At
			case api.PhaseInputsFetched:
				s.turn = p.At // the last: a gated step's inputs are ready at its go-ahead
			case api.PhaseRunning:
				s.running = p.At
			case api.PhaseProcessExited:
				s.exited = p.At
			case api.PhaseFinished:
				s.finished = p.At
			}
		}
		if s.turn.IsZero() || s.running.IsZero() || s.exited.IsZero() || s.finished.IsZero() {
			return fmt.Errorf("build %d, step %s: phases %v lack one of inputs_fetched, running, process_exited, finished", id, sid, rec.Phases)
		}
		steps = append(steps, s)
	}
	slices.SortFunc(steps, func(a, b step) int { return a.running.Compare(b.running) })
	for i, s := range steps {
		g.turnToRunning = append(g.turnToRunning, s.running.Sub(s.turn))
		g.runningToExited = append(g.runningToExited, s.exited.Sub(s.running))
		g.exitToFinished = append(g.exitToFinished, s.finished.Sub(s.exited))
		if i > 0 {
			g.finishedToTurn = append(g.finishedToTurn, s.turn.Sub(steps[i-1].finished))
			g.turns++
			if !s.waiting.IsZero() && s.waiting.Before(steps[i-1].finished) {
				g.ready++
			}
		}
	}
	return nil
}

func (g *stepGaps) print(what string) {
	if len(g.finishedToTurn) == 0 {
		return
	}
	med := func(ds []time.Duration) string { return benchstat.Median(ds).Round(time.Millisecond).String() }
	var sum time.Duration
	for _, d := range g.finishedToTurn {
		sum += d
	}
	fmt.Printf("  %-58s process exit → sidecar done %s; → next go-ahead %s (mean %s); → next process %s; `true` %s (medians); %d of %d pods waited ready for their turn\n", what,
		med(g.exitToFinished), med(g.finishedToTurn), (sum / time.Duration(len(g.finishedToTurn))).Round(time.Millisecond),
		med(g.turnToRunning), med(g.runningToExited), g.ready, g.turns)
}
