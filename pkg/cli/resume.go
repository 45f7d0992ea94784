package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/porter-ci/porter/pkg/atcclient"
)

// resumeCommand is Porter's own (fly has none): a new build of a failed
// job build's job that reuses the steps that succeeded and runs from the
// one that failed.
func (a *app) resumeCommand() *cobra.Command {
	var build string
	var watch bool
	cmd := &cobra.Command{
		Use:   "resume -b BUILD [-w]",
		Short: "Resume a failed job build from its failed step",
		Long: `Makes a new build of a failed (or errored) job build's job, named as
fly rerun-build names it (N.1), with the same inputs and the same plan:
the steps that succeeded are not run again (their outputs are taken from
the blobstore, their log says "reused from build N") and the build runs
on from the step that failed. A put that succeeded is never repeated.
With -w, its output is streamed and the command exits as watch does.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			id, err := parseBuildID(build)
			if err != nil {
				return err
			}
			c, err := a.client("")
			if err != nil {
				return err
			}
			tctx, cancel := withTimeout(ctx)
			b, err := c.ResumeBuild(tctx, id)
			cancel()
			if err != nil {
				if atcclient.IsNotFound(err) {
					return errors.New("build does not exist")
				}
				return err
			}
			fmt.Fprintf(a.stdout, "started %s/%s #%s (build %d)\n", b.PipelineName, b.JobName, b.Name, b.ID)
			if !watch {
				return nil
			}
			return a.watch(ctx, c, int64(b.ID))
		},
	}
	cmd.Flags().StringVarP(&build, "build", "b", "", "the failed build's ID")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "stream the new build's output")
	_ = cmd.MarkFlagRequired("build")
	return cmd
}
