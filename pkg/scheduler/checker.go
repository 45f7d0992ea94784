package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// Check defaults, as Concourse's.
const (
	DefaultCheckEvery   = time.Minute
	DefaultCheckTimeout = time.Hour
)

// CheckRunner runs a check build recorded by the Checker: it ends the build
// after timeout, and calls Checker.Finished when it ends.
type CheckRunner interface {
	RunCheck(ctx context.Context, b db.JobBuild, plan concourse.Plan, timeout time.Duration) error
}

// Checker starts the checks of resources that are due. Run Tick where only
// one server may (under db.LockScheduler); StartCheck also answers `fly
// check-resource` on any server.
type Checker struct {
	DB      *db.DB
	Planner Planner
	Runner  CheckRunner
	Server  string // the id of the server that runs the check builds
	Log     *slog.Logger
}

// CheckSettings are a resource's check_every and check_timeout.
type CheckSettings struct {
	Every   time.Duration // 0: never checked periodically
	Timeout time.Duration
}

// ParseCheckSettings reads a resource's check_every ("never" disables
// periodic checks) and check_timeout, with Concourse's defaults.
func ParseCheckSettings(rc *concourse.ResourceConfig) (CheckSettings, error) {
	cs := CheckSettings{Every: DefaultCheckEvery, Timeout: DefaultCheckTimeout}
	switch rc.CheckEvery {
	case "":
	case "never":
		cs.Every = 0
	default:
		d, err := time.ParseDuration(rc.CheckEvery)
		if err != nil || d <= 0 {
			return cs, fmt.Errorf("resource %s: check_every %q: want a positive duration or \"never\"", rc.Name, rc.CheckEvery)
		}
		cs.Every = d
	}
	if rc.CheckTimeout != "" {
		d, err := time.ParseDuration(rc.CheckTimeout)
		if err != nil || d <= 0 {
			return cs, fmt.Errorf("resource %s: check_timeout %q: want a positive duration", rc.Name, rc.CheckTimeout)
		}
		cs.Timeout = d
	}
	return cs, nil
}

// Jitter spreads a check interval by ±10% so that resources saved together
// are not all checked in the same instant.
func Jitter(d time.Duration) time.Duration {
	spread := int64(d) / 5
	if spread <= 0 {
		return d
	}
	return d - time.Duration(spread/2) + time.Duration(rand.Int64N(spread+1))
}

// Tick starts a check of every resource that is due or was asked for and
// has no check running.
func (c *Checker) Tick(ctx context.Context) error {
	now := time.Now()
	rs, err := c.DB.ResourcesToCheck(ctx, now)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range rs {
		var rc concourse.ResourceConfig
		if err := json.Unmarshal(r.Config, &rc); err != nil {
			errs = append(errs, fmt.Errorf("resource %s/%s: decode its config: %w", r.PipelineName, r.Name, err))
			continue
		}
		cs, err := ParseCheckSettings(&rc)
		if err != nil {
			// A bad interval is the resource's problem, shown on it; it is
			// looked at again in a minute, not on every tick.
			errs = append(errs, errors.Join(err,
				c.DB.CheckStarted(ctx, r.ID, r.LastCheckBuild, now, now.Add(DefaultCheckEvery)),
				c.DB.CheckFinished(ctx, r.ID, now, err.Error())))
			continue
		}
		if cs.Every == 0 && !r.CheckRequested {
			continue
		}
		if _, err := c.StartCheck(ctx, r, r.CheckFromVersion); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// StartCheck records a check build of the resource from a version (nil:
// from its latest version) and runs it. The next periodic check is due one
// jittered interval later.
func (c *Checker) StartCheck(ctx context.Context, r db.ResourceRef, from map[string]string) (db.JobBuild, error) {
	var cfg concourse.Config
	if err := c.pipelineConfig(ctx, r, &cfg); err != nil {
		return db.JobBuild{}, err
	}
	var rc *concourse.ResourceConfig
	for i := range cfg.Resources {
		if cfg.Resources[i].Name == r.Name {
			rc = &cfg.Resources[i]
		}
	}
	if rc == nil {
		return db.JobBuild{}, fmt.Errorf("check %s/%s: the resource is not in the pipeline's config", r.PipelineName, r.Name)
	}
	cs, err := ParseCheckSettings(rc)
	if err != nil {
		return db.JobBuild{}, err
	}
	if from == nil {
		latest, err := c.DB.LatestVersion(ctx, r.ID)
		switch {
		case err == nil:
			from = latest.Version
		case !errors.Is(err, db.ErrNotFound):
			return db.JobBuild{}, err
		}
	}
	plan, err := c.Planner.CheckPlan(&cfg, rc, from)
	if err != nil {
		now := time.Now()
		err = fmt.Errorf("plan the check of %s/%s: %w", r.PipelineName, r.Name, err)
		next := now.Add(Jitter(max(cs.Every, DefaultCheckEvery)))
		return db.JobBuild{}, errors.Join(err, c.DB.CheckStarted(ctx, r.ID, r.LastCheckBuild, now, next), c.DB.CheckFinished(ctx, r.ID, now, err.Error()))
	}
	body, err := json.Marshal(plan)
	if err != nil {
		return db.JobBuild{}, fmt.Errorf("encode the check plan of %s: %w", r.Name, err)
	}
	now := time.Now()
	b, err := c.DB.CreateCheckBuild(ctx, r, body, c.Server, now)
	if err != nil {
		return db.JobBuild{}, err
	}
	next := now.Add(Jitter(cs.Every))
	if cs.Every == 0 {
		next = now.Add(100 * 365 * 24 * time.Hour) // "never": only on request
	}
	if err := c.DB.CheckStarted(ctx, r.ID, b.ID, now, next); err != nil {
		return b, err
	}
	if err := c.Runner.RunCheck(ctx, b, plan, cs.Timeout); err != nil {
		return b, fmt.Errorf("run the check of %s/%s: %w", r.PipelineName, r.Name, err)
	}
	c.Log.Debug("check started", "pipeline", r.PipelineName, "resource", r.Name, "build", b.ID)
	return b, nil
}

// Finished records how a check build ended: checkErr is empty when it
// succeeded, otherwise it is shown on the resource until the next check
// succeeds.
func (c *Checker) Finished(ctx context.Context, resourceID int64, checkErr string) error {
	return c.DB.CheckFinished(ctx, resourceID, time.Now(), checkErr)
}

func (c *Checker) pipelineConfig(ctx context.Context, r db.ResourceRef, cfg *concourse.Config) error {
	raw, err := c.DB.PipelineConfigOf(ctx, r.PipelineID)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, cfg); err != nil {
		return fmt.Errorf("pipeline %s: decode its config: %w", r.PipelineName, err)
	}
	return nil
}
