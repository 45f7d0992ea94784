package gc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// LogRetention is how much of a job's build history keeps its logs:
// the newest Builds builds, builds that ended less than Days days ago,
// and at least MinimumSucceeded succeeded builds among those counted. Zero
// Builds and Days keep everything.
type LogRetention struct {
	Builds           int
	Days             int
	MinimumSucceeded int
}

// LogRetentionLimits are the server's defaults and caps, as Concourse's
// --default-build-logs-to-retain, --max-build-logs-to-retain,
// --default-days-to-retain-build-logs and --max-days-to-retain-build-logs.
type LogRetentionLimits struct {
	DefaultBuilds, MaxBuilds int
	DefaultDays, MaxDays     int
}

// jobRetention is the part of a job's config retention reads.
type jobRetention struct {
	BuildLogsToRetain int `json:"build_logs_to_retain"`
	BuildLogRetention *struct {
		Builds                 int `json:"builds"`
		Days                   int `json:"days"`
		MinimumSucceededBuilds int `json:"minimum_succeeded_builds"`
	} `json:"build_log_retention"`
}

// For is the retention of a job with config (Concourse's JobConfig JSON):
// the job's own setting, else the default, capped by the maximum.
func (l LogRetentionLimits) For(config json.RawMessage) (LogRetention, error) {
	var j jobRetention
	if err := json.Unmarshal(config, &j); err != nil {
		return LogRetention{}, fmt.Errorf("job config: %w", err)
	}
	var r LogRetention
	if j.BuildLogRetention != nil {
		r = LogRetention{Builds: j.BuildLogRetention.Builds, Days: j.BuildLogRetention.Days, MinimumSucceeded: j.BuildLogRetention.MinimumSucceededBuilds}
	} else {
		r.Builds = j.BuildLogsToRetain
	}
	// A negative count or age in a job's config keeps everything: a typo
	// must not delete a job's history.
	r.Builds, r.Days, r.MinimumSucceeded = max(r.Builds, 0), max(r.Days, 0), max(r.MinimumSucceeded, 0)
	if r.Builds == 0 {
		r.Builds = l.DefaultBuilds
	}
	if r.Days == 0 {
		r.Days = l.DefaultDays
	}
	capAt := func(v, most int) int {
		if most > 0 && (v == 0 || v > most) {
			return most
		}
		return v
	}
	r.Builds, r.Days = capAt(r.Builds, l.MaxBuilds), capAt(r.Days, l.MaxDays)
	return r, nil
}

// Reap picks, from a job's builds whose logs are kept (newest first), those
// whose logs go. A running build is never picked. A build is kept while
// fewer than Builds are kept, or while it ended less than Days ago; the
// newest MinimumSucceeded succeeded builds are kept and counted, and the
// oldest of the others go instead when they push the count over Builds.
func (r LogRetention) Reap(builds []db.LoggedBuild, now time.Time) []int64 {
	if r.Builds == 0 && r.Days == 0 {
		return nil
	}
	var reap, kept []int64
	retained, succeeded := 0, 0
	for _, b := range builds {
		if b.EndTime.IsZero() {
			continue
		}
		if r.Builds > 0 {
			if b.Status == concourse.StatusSucceeded && succeeded < r.MinimumSucceeded {
				retained++
				succeeded++
				continue
			}
			if retained < r.Builds {
				retained++
				kept = append(kept, b.ID)
				continue
			}
		}
		if r.Days > 0 && b.EndTime.AddDate(0, 0, r.Days).After(now) {
			retained++
			kept = append(kept, b.ID)
			continue
		}
		reap = append(reap, b.ID)
	}
	if r.Builds > 0 && retained > r.Builds {
		for i := 0; i < retained-r.Builds && i < len(kept); i++ {
			reap = append(reap, kept[len(kept)-1-i])
		}
	}
	return reap
}

// LogStore is what build log retention needs of the database (part of Store).
type LogStore interface {
	JobLogConfigs(ctx context.Context) ([]db.JobLogConfig, error)
	LoggedBuilds(ctx context.Context, jobID int64) ([]db.LoggedBuild, error)
	ReapBuildLogs(ctx context.Context, ids []int64) (int64, error)
}

// reapBuildLogs applies every job's build log retention; the objects of
// the reaped logs go in this pass's buildLogs step.
func (c *Collector) reapBuildLogs(ctx context.Context, res *Result) error {
	store := c.db
	jobs, err := store.JobLogConfigs(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, j := range jobs {
		r, err := c.cfg.LogRetention.For(j.Config)
		if err != nil {
			errs = append(errs, fmt.Errorf("job %d: %w", j.JobID, err))
			continue
		}
		if r.Builds == 0 && r.Days == 0 {
			continue
		}
		builds, err := store.LoggedBuilds(ctx, j.JobID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n, err := store.ReapBuildLogs(ctx, r.Reap(builds, c.Now()))
		errs = append(errs, err)
		res.ReapedBuildLogs += int(n)
	}
	return errors.Join(errs...)
}
