package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/porter-ci/porter/pkg/atcclient"
	"github.com/porter-ci/porter/pkg/concourse"
)

// parseBuildID reads -b: a global build ID.
func parseBuildID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("-b %q is not a build ID", s)
	}
	return id, nil
}

// latestOneOff is the newest build that is not a job's, as fly's watch and
// intercept pick it when no build is named.
func latestOneOff(ctx context.Context, c *atcclient.Client) (int64, error) {
	builds, err := c.Builds(ctx, 100)
	if err != nil {
		return 0, fmt.Errorf("failed to get builds %w", err)
	}
	for _, b := range builds {
		if b.JobName == "" {
			return b.ID, nil
		}
	}
	return 0, errors.New("no builds match job")
}

func (a *app) watchCommand() *cobra.Command {
	var build string
	var timestamps bool
	cmd := &cobra.Command{
		Use:   "watch [-b BUILD]",
		Short: "Stream a build's output and exit with its result",
		Long: `Streams the output of a build (from its start, also when it is over) and
exits as execute does. Without -b, the newest one-off build.
Ctrl-C stops watching; the build goes on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := a.client("")
			if err != nil {
				return err
			}
			var id int64
			if build != "" {
				if id, err = parseBuildID(build); err != nil {
					return err
				}
			} else if id, err = latestOneOff(ctx, c); err != nil {
				return err
			}
			return a.watch(ctx, c, id)
		},
	}
	cmd.Flags().StringVarP(&build, "build", "b", "", "the build's ID")
	// fly's is -t, which is the target here.
	cmd.Flags().BoolVar(&timestamps, "timestamps", false, "accepted for fly's sake; output is not timestamped")
	_ = cmd.Flags().MarkHidden("timestamps")
	return cmd
}

func (a *app) abortCommand() *cobra.Command {
	var build string
	cmd := &cobra.Command{
		Use:   "abort -b BUILD",
		Short: "Abort a build",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := withTimeout(cmd.Context())
			defer cancel()
			id, err := parseBuildID(build)
			if err != nil {
				return err
			}
			c, err := a.client("")
			if err != nil {
				return err
			}
			if _, err := c.Build(ctx, id); err != nil {
				if atcclient.IsNotFound(err) {
					return errors.New("build does not exist")
				}
				return err
			}
			if err := c.AbortBuild(ctx, id); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, "build successfully aborted")
			return nil
		},
	}
	cmd.Flags().StringVarP(&build, "build", "b", "", "the build's ID")
	_ = cmd.MarkFlagRequired("build")
	return cmd
}

type buildsFlags struct {
	count       int
	asJSON      bool
	teams       []string
	allTeams    bool
	currentTeam bool
}

func (a *app) buildsCommand() *cobra.Command {
	var f buildsFlags
	cmd := &cobra.Command{
		Use:   "builds [-c COUNT] [--json]",
		Short: "List builds, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.builds(cmd.Context(), &f)
		},
	}
	fl := cmd.Flags()
	fl.IntVarP(&f.count, "count", "c", 50, "number of builds to show")
	fl.BoolVar(&f.asJSON, "json", false, "print the builds as JSON")
	fl.StringArrayVarP(&f.teams, "team", "n", nil, "show builds of this team (repeatable)")
	fl.BoolVarP(&f.allTeams, "all-teams", "a", false, "show builds of every team the token reaches")
	fl.BoolVar(&f.currentTeam, "current-team", false, "show builds of the target's team")
	return cmd
}

func (a *app) builds(ctx context.Context, f *buildsFlags) error {
	switch {
	case f.currentTeam && f.allTeams:
		return errors.New("Cannot specify both --all-teams and --current-team")
	case len(f.teams) > 0 && f.allTeams:
		return errors.New("Cannot specify both --all-teams and --team")
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	c, err := a.client("")
	if err != nil {
		return err
	}
	teams := f.teams
	if f.currentTeam {
		teams = append([]string{c.Team()}, teams...)
	}
	if f.allTeams {
		all, err := c.Teams(ctx)
		if err != nil {
			return err
		}
		for _, t := range all {
			teams = append(teams, t.Name)
		}
	}
	var builds []concourse.Build
	if len(teams) == 0 {
		if builds, err = c.Builds(ctx, f.count); err != nil {
			return err
		}
	}
	for _, team := range teams {
		tb, err := c.TeamBuilds(ctx, team, f.count)
		if err != nil {
			return err
		}
		builds = append(builds, tb...)
	}
	if f.count >= 0 && len(builds) > f.count {
		builds = builds[:f.count]
	}
	if f.asJSON {
		if builds == nil {
			builds = []concourse.Build{}
		}
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(builds)
	}
	rows := [][]string{}
	for _, b := range builds {
		rows = append(rows, buildRow(b, time.Now()))
	}
	a.table([]string{"id", "name", "status", "start", "end", "duration", "team", "created by"}, rows)
	return nil
}

// buildTimeLayout is fly's.
const buildTimeLayout = "2006-01-02@15:04:05-0700"

// buildRow is a build as fly's builds table shows it.
func buildRow(b concourse.Build, now time.Time) []string {
	var names []string
	for _, n := range []string{b.PipelineName, b.JobName, b.ResourceName} {
		if n != "" {
			names = append(names, n)
		}
	}
	names = append(names, b.Name)
	start, end, duration := "n/a", "n/a", "n/a"
	if b.StartTime != 0 {
		st := time.Unix(b.StartTime, 0)
		start = st.Local().Format(buildTimeLayout)
		if b.EndTime == 0 {
			d := now.Sub(st)
			duration = fmt.Sprintf("%v+", d-d%time.Second)
		} else {
			duration = time.Unix(b.EndTime, 0).Sub(st).String()
		}
	}
	if b.EndTime != 0 {
		end = time.Unix(b.EndTime, 0).Local().Format(buildTimeLayout)
	}
	createdBy := "system"
	if b.CreatedBy != nil {
		createdBy = *b.CreatedBy
	}
	return []string{strconv.FormatInt(b.ID, 10), strings.Join(names, "/"), string(b.Status), start, end, duration, b.TeamName, createdBy}
}

// table prints rows as fly does: columns padded to their widest cell,
// two spaces apart; headers only on a terminal or with
// --print-table-headers.
func (a *app) table(headers []string, rows [][]string) {
	withHeaders := a.stdoutTTY || a.printTableHeaders
	widths := make([]int, len(headers))
	if withHeaders {
		for i, h := range headers {
			widths[i] = len(h)
		}
	}
	for _, r := range rows {
		for i, cell := range r {
			widths[i] = max(widths[i], len(cell))
		}
	}
	var b strings.Builder
	line := func(cells []string, bold bool) {
		for i, cell := range cells {
			pad := strings.Repeat(" ", widths[i]-len(cell))
			if bold {
				cell = a.styled(styleBold, cell)
			}
			b.WriteString(cell + pad)
			if i+1 < len(cells) {
				b.WriteString("  ")
			}
		}
		b.WriteString("\n")
	}
	if withHeaders {
		line(headers, true)
	}
	for _, r := range rows {
		line(r, false)
	}
	fmt.Fprint(a.stdout, b.String())
}
