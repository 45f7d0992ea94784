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

	"github.com/porter-ci/porter/pkg/api"
)

const auditUsage = `usage: ` + Program + ` audit [--atc URL] [--json] BUILD

Shows build BUILD's audit trail as stored in the blobstore: every object
under builds/BUILD/, and for each step what ran, where, with which inputs
(by digest) and what came out.

options:
      --json   print the trail as JSON
`

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
		var rec api.StepRecord
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
			arts []api.StepArtifact
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
