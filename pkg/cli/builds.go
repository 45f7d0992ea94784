package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/porter-ci/porter/pkg/api"
)

const watchUsage = `usage: ` + Program + ` watch [--atc URL] BUILD

Streams the output of build BUILD (from its start, also when it is over)
and exits as execute does: the task's exit status when it failed, 0 when it
succeeded, 2 when it errored, 3 when it was aborted.
Ctrl-C stops watching; the build goes on.
`

const abortUsage = `usage: ` + Program + ` abort [--atc URL] BUILD

Aborts build BUILD.
`

const buildsUsage = `usage: ` + Program + ` builds [--atc URL] [-c COUNT] [--json]

Lists builds, newest first.

options:
  -c, --count COUNT   show at most COUNT builds (default 50; 0: all)
      --json          print the builds as JSON
`

// buildArg parses the BUILD argument of a command.
func buildArg(cmd string, rest []string) (int64, error) {
	if len(rest) != 1 {
		return 0, fmt.Errorf("%s: want one BUILD argument, got %d", cmd, len(rest))
	}
	id, err := strconv.ParseInt(rest[0], 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%s: %q is not a build id", cmd, rest[0])
	}
	return id, nil
}

func (a *app) watch(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	atc := addATCFlag(fs)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return a.usageError(fmt.Errorf("watch: %w", err), watchUsage)
	}
	id, err := buildArg("watch", rest)
	if err != nil {
		return a.usageError(err, watchUsage)
	}
	c, err := a.client(*atc)
	if err != nil {
		a.printError("watch", err)
		return ExitErrored
	}
	res, err := a.follow(ctx, c, id, false)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(a.stderr, "\ninterrupted; the build goes on")
			return ExitInterrupted
		}
		a.printError("watch", err)
		return ExitErrored
	}
	return res.exitCode()
}

func (a *app) abort(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("abort", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	atc := addATCFlag(fs)
	rest, err := parseFlags(fs, args)
	if err != nil {
		return a.usageError(fmt.Errorf("abort: %w", err), abortUsage)
	}
	id, err := buildArg("abort", rest)
	if err != nil {
		return a.usageError(err, abortUsage)
	}
	c, err := a.client(*atc)
	if err != nil {
		a.printError("abort", err)
		return ExitFailed
	}
	if err := c.AbortBuild(ctx, id); err != nil {
		a.printError("abort", err)
		return ExitFailed
	}
	fmt.Fprintf(a.stdout, "build %d is being aborted\n", id)
	return ExitSucceeded
}

func (a *app) builds(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("builds", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	atc := addATCFlag(fs)
	var count int
	var asJSON bool
	for _, name := range []string{"c", "count"} {
		fs.IntVar(&count, name, 50, "")
	}
	fs.BoolVar(&asJSON, "json", false, "")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return a.usageError(fmt.Errorf("builds: %w", err), buildsUsage)
	}
	if len(rest) > 0 {
		return a.usageError(fmt.Errorf("builds: unexpected argument %q", rest[0]), buildsUsage)
	}
	if count < 0 {
		return a.usageError(fmt.Errorf("builds: --count %d is negative", count), buildsUsage)
	}
	c, err := a.client(*atc)
	if err != nil {
		a.printError("builds", err)
		return ExitFailed
	}
	bs, err := c.Builds(ctx)
	if err != nil {
		a.printError("builds", err)
		return ExitFailed
	}
	if count > 0 && len(bs) > count {
		bs = bs[:count]
	}
	if asJSON {
		if bs == nil {
			bs = []api.Build{}
		}
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(bs); err != nil {
			a.printError("builds", err)
			return ExitFailed
		}
		return ExitSucceeded
	}
	a.buildsTable(bs)
	return ExitSucceeded
}

// buildsTable prints builds as fly builds does: one line each, aligned.
func (a *app) buildsTable(bs []api.Build) {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tname\tstatus\tteam\tstarted\tduration")
	now := a.now()
	for _, b := range bs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n",
			b.ID, orNA(b.Name), orNA(b.Status), orNA(b.Team), startedAt(b), duration(b, now))
	}
	tw.Flush()
}

func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}

// fly's time format, in local time.
const timeFormat = "2006-01-02@15:04:05-0700"

func startedAt(b api.Build) string {
	if b.StartTime == 0 {
		return "n/a"
	}
	return time.Unix(b.StartTime, 0).Format(timeFormat)
}

func duration(b api.Build, now time.Time) string {
	switch {
	case b.StartTime == 0:
		return "n/a"
	case b.EndTime != 0:
		return (time.Duration(b.EndTime-b.StartTime) * time.Second).String()
	case api.Finished(b.Status):
		return "n/a"
	}
	return now.Sub(time.Unix(b.StartTime, 0)).Truncate(time.Second).String() + "+"
}
