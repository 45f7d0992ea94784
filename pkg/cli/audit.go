package cli

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/porter-ci/porter/pkg/api"
)

func (a *app) auditCommand() *cobra.Command {
	var build string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "audit -b BUILD [--json]",
		Short: "Show a build's audit trail from the blobstore (Porter's own)",
		Long: `Shows a build's audit trail as stored in the blobstore: every object under
builds/BUILD/, and for each step what ran, where, with which inputs (by
digest) and what came out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, err := parseBuildID(build)
			if err != nil {
				return err
			}
			c, err := a.client("")
			if err != nil {
				return err
			}
			ctx, cancel := withTimeout(cmd.Context())
			defer cancel()
			trail, err := c.Audit(ctx, id)
			if err != nil {
				return err
			}
			return a.printAudit(id, trail, asJSON)
		},
	}
	cmd.Flags().StringVarP(&build, "build", "b", "", "the build's ID")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the records themselves, as JSON")
	_ = cmd.MarkFlagRequired("build")
	return cmd
}

// printAudit shows an audit trail.
func (a *app) printAudit(id int64, trail api.Audit, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(trail)
	}
	if len(trail.Objects) == 0 {
		fmt.Fprintf(a.stdout, "build %d has no audit records yet (they are written as its steps run)\n", id)
		return nil
	}
	fmt.Fprintf(a.stdout, "objects:\n")
	for _, o := range trail.Objects {
		fmt.Fprintf(a.stdout, "  %-72s %10s\n", o.Key, formatBytes(o.Size))
	}
	for _, stepID := range slices.Sorted(maps.Keys(trail.Steps)) {
		var rec api.StepRecord
		if err := json.Unmarshal(trail.Steps[stepID], &rec); err != nil {
			return fmt.Errorf("decode the result of step %s: %w", stepID, err)
		}
		fmt.Fprintf(a.stdout, "\nstep %s (%s): %s, exit status %d\n", rec.StepID, rec.StepName, rec.Result, rec.ExitStatus)
		if rec.Error != "" {
			fmt.Fprintf(a.stdout, "  error:    %s\n", rec.Error)
		}
		fmt.Fprintf(a.stdout, "  image:    %s\n  pod:      %s (porter %s)\n", rec.Image, rec.Pod, rec.PorterVersion)
		fmt.Fprintf(a.stdout, "  ran:      %s → %s (%s)\n", rec.StartedAt.Format(time.RFC3339), rec.FinishedAt.Format(time.RFC3339),
			rec.FinishedAt.Sub(rec.StartedAt).Round(time.Millisecond))
		fmt.Fprintf(a.stdout, "  used:     %s\n", usageLine(rec.Usage))
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
	return nil
}

// usageLine says what a step's container used, or that it is not known
// (the kernel does not offer it, the process never ran, an older sidecar).
func usageLine(u *api.ResourceUsage) string {
	mem, cpu := "not available", "not available"
	if u != nil && u.MemoryPeakBytes > 0 {
		mem = formatBytes(u.MemoryPeakBytes)
	}
	if u != nil && u.CPUSeconds > 0 {
		cpu = strconv.FormatFloat(u.CPUSeconds, 'f', 2, 64) + " s"
	}
	return "peak memory " + mem + ", CPU time " + cpu + " (the step container's cgroup)"
}
