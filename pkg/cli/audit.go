package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"
)

const auditUsage = `usage: ` + Program + ` audit [--atc URL] [--json] BUILD

Shows build BUILD's audit trail as stored in the blobstore: every object
under builds/BUILD/, and for each step what ran, where, with which inputs
(by digest) and what came out.

options:
      --json   print the trail as JSON
`

// stepRecord is the part of a step's result.json that audit prints.
type stepRecord struct {
	StepID        string          `json:"step_id"`
	StepName      string          `json:"step_name"`
	Pod           string          `json:"pod"`
	Image         string          `json:"image"`
	PorterVersion string          `json:"porter_version"`
	StartedAt     time.Time       `json:"started_at"`
	FinishedAt    time.Time       `json:"finished_at"`
	Result        string          `json:"result"`
	ExitStatus    int             `json:"exit_status"`
	Error         string          `json:"error"`
	Inputs        []auditArtifact `json:"inputs"`
	Outputs       []auditArtifact `json:"outputs"`
	Caches        []auditArtifact `json:"caches"`
	EventsKey     string          `json:"events_key"`
	EventsDigest  string          `json:"events_digest"`
}

type auditArtifact struct {
	Name   string `json:"name"`
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
}

func (a *app) audit(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	atc := addATCFlag(fs)
	asJSON := fs.Bool("json", false, "")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return a.usageError(fmt.Errorf("audit: %w", err), auditUsage)
	}
	id, err := buildArg("audit", rest)
	if err != nil {
		return a.usageError(err, auditUsage)
	}
	c, err := a.client(*atc)
	if err != nil {
		a.printError("audit", err)
		return ExitFailed
	}
	trail, err := c.Audit(ctx, id)
	if err != nil {
		a.printError("audit", err)
		return ExitFailed
	}
	if *asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(trail)
		return ExitSucceeded
	}
	if len(trail.Objects) == 0 {
		fmt.Fprintf(a.stdout, "build %d has no audit records yet (they are written as its steps run)\n", id)
		return ExitSucceeded
	}
	fmt.Fprintf(a.stdout, "objects:\n")
	for _, o := range trail.Objects {
		fmt.Fprintf(a.stdout, "  %-72s %10s\n", o.Key, formatBytes(o.Size))
	}
	for _, stepID := range slices.Sorted(maps.Keys(trail.Steps)) {
		var rec stepRecord
		if err := json.Unmarshal(trail.Steps[stepID], &rec); err != nil {
			a.printError("audit", fmt.Errorf("decode the result of step %s: %w", stepID, err))
			return ExitFailed
		}
		fmt.Fprintf(a.stdout, "\nstep %s (%s): %s, exit status %d\n", rec.StepID, rec.StepName, rec.Result, rec.ExitStatus)
		if rec.Error != "" {
			fmt.Fprintf(a.stdout, "  error:    %s\n", rec.Error)
		}
		fmt.Fprintf(a.stdout, "  image:    %s\n  pod:      %s (porter %s)\n", rec.Image, rec.Pod, rec.PorterVersion)
		fmt.Fprintf(a.stdout, "  ran:      %s → %s (%s)\n", rec.StartedAt.Format(time.RFC3339), rec.FinishedAt.Format(time.RFC3339),
			rec.FinishedAt.Sub(rec.StartedAt).Round(time.Millisecond))
		for _, group := range []struct {
			what string
			arts []auditArtifact
		}{{"input", rec.Inputs}, {"output", rec.Outputs}, {"cache", rec.Caches}} {
			for _, art := range group.arts {
				fmt.Fprintf(a.stdout, "  %-8s  %s: %s %s (%s)\n", group.what+":", art.Name, art.Key, art.Digest, formatBytes(art.Size))
			}
		}
		if rec.EventsKey != "" {
			fmt.Fprintf(a.stdout, "  events:   %s %s\n", rec.EventsKey, rec.EventsDigest)
		}
	}
	return ExitSucceeded
}
