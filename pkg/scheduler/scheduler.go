package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
)

// Planner turns configs into build plans (pkg/pipeline implements it).
type Planner interface {
	// JobPlan is the plan of a build of job with the chosen inputs (input
	// name -> version).
	JobPlan(cfg *concourse.Config, job *concourse.JobConfig, inputs map[string]map[string]string) (concourse.Plan, error)
	// CheckPlan is the plan of a check of res from a version (nil: none yet).
	CheckPlan(cfg *concourse.Config, res *concourse.ResourceConfig, from map[string]string) (concourse.Plan, error)
}

// Starter runs builds the scheduler decided to start.
type Starter interface {
	// StartJobBuild marks the pending build started with plan
	// (db.StartJobBuild) and runs it. db.ErrConflict means someone else
	// started it.
	StartJobBuild(ctx context.Context, b db.JobBuild, plan concourse.Plan) error
	// FailJobBuild ends the pending build as errored, showing err in its
	// events: its plan could not be made.
	FailJobBuild(ctx context.Context, b db.JobBuild, err error) error
	// AbortJobBuild ends the pending build as aborted: someone aborted it
	// before it started. Its events say so, as a started build's do.
	AbortJobBuild(ctx context.Context, b db.JobBuild) error
}

// Scheduler creates and starts job builds. Run Tick where only one server
// may (under db.LockScheduler).
type Scheduler struct {
	DB      *db.DB
	Planner Planner
	Starter Starter
	Log     *slog.Logger
}

// maxNewBuilds bounds how many builds one job gets in one tick (several
// when `version: every` has a backlog); the next tick continues.
const maxNewBuilds = 20

// Tick looks at every schedulable job once: it creates the builds new
// trigger versions call for, then starts the pending builds that may start.
// Errors of one job do not keep the others from being scheduled.
func (s *Scheduler) Tick(ctx context.Context) error {
	// Paused jobs' too: an abort is acted on whether or not the job runs.
	abortErr := s.endAborted(ctx)
	jobs, err := s.DB.SchedulableJobs(ctx)
	if err != nil {
		return errors.Join(abortErr, err)
	}
	byPipeline := map[int64][]db.JobRef{}
	var pipelines []int64
	for _, j := range jobs {
		if _, ok := byPipeline[j.PipelineID]; !ok {
			pipelines = append(pipelines, j.PipelineID)
		}
		byPipeline[j.PipelineID] = append(byPipeline[j.PipelineID], j)
	}
	errs := []error{abortErr}
	for _, p := range pipelines {
		if err := s.schedulePipeline(ctx, byPipeline[p]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// endAborted ends the pending job builds someone aborted.
func (s *Scheduler) endAborted(ctx context.Context) error {
	builds, err := s.DB.AbortedPendingJobBuilds(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, b := range builds {
		errs = append(errs, s.abort(ctx, b))
	}
	return errors.Join(errs...)
}

func (s *Scheduler) abort(ctx context.Context, b db.JobBuild) error {
	if err := s.Starter.AbortJobBuild(ctx, b); err != nil && !errors.Is(err, db.ErrConflict) {
		return fmt.Errorf("job %s/%s build %s: end it aborted: %w", b.PipelineName, b.JobName, b.Name, err)
	}
	return nil
}

// pipelineState is what scheduling one pipeline's jobs reads once.
type pipelineState struct {
	cfg       concourse.Config
	resources map[string]db.ResourceRef
	jobIDs    map[string]int64
}

func (s *Scheduler) schedulePipeline(ctx context.Context, jobs []db.JobRef) error {
	p := jobs[0]
	st := pipelineState{resources: map[string]db.ResourceRef{}, jobIDs: map[string]int64{}}
	if err := json.Unmarshal(p.PipelineConfig, &st.cfg); err != nil {
		return fmt.Errorf("pipeline %s: decode its config: %w", p.PipelineName, err)
	}
	rs, err := s.DB.PipelineResources(ctx, p.PipelineID)
	if err != nil {
		return err
	}
	for _, r := range rs {
		st.resources[r.Name] = r
	}
	for _, j := range jobs {
		st.jobIDs[j.Name] = j.ID
	}
	var errs []error
	configs := map[int64]*concourse.JobConfig{}
	for _, j := range jobs {
		var cfg concourse.JobConfig
		if err := json.Unmarshal(j.Config, &cfg); err != nil {
			errs = append(errs, fmt.Errorf("job %s/%s: decode its config: %w", j.PipelineName, j.Name, err))
			continue
		}
		configs[j.ID] = &cfg
		if err := s.trigger(ctx, &st, j, &cfg); err != nil {
			errs = append(errs, fmt.Errorf("job %s/%s: %w", j.PipelineName, j.Name, err))
		}
	}
	if err := s.startPending(ctx, &st, jobs, configs); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// trigger creates builds of the job while a trigger input has a version
// the job never used.
func (s *Scheduler) trigger(ctx context.Context, st *pipelineState, j db.JobRef, cfg *concourse.JobConfig) error {
	inputs := JobInputs(cfg)
	if !hasTrigger(inputs) {
		return nil
	}
	for range maxNewBuilds {
		chosen, reason, err := s.chooseInputs(ctx, st, j, inputs)
		if err != nil {
			return err
		}
		if reason != "" {
			return s.setWaiting(ctx, j, reason)
		}
		if err := s.setWaiting(ctx, j, ""); err != nil {
			return err
		}
		history, err := s.DB.JobInputHistory(ctx, j.ID)
		if err != nil {
			return err
		}
		fresh := false
		for _, in := range inputs {
			if in.Trigger && !history[in.Name][chosen[in.Name].VersionID] {
				fresh = true
			}
		}
		if !fresh {
			return nil
		}
		b, err := s.DB.CreateJobBuild(ctx, j.ID, "", false, buildInputs(chosen))
		if err != nil {
			return err
		}
		s.Log.Info("new inputs: build created", "pipeline", j.PipelineName, "job", j.Name, "build", b.Name)
	}
	return nil
}

func hasTrigger(inputs []Input) bool {
	for _, in := range inputs {
		if in.Trigger {
			return true
		}
	}
	return false
}

func buildInputs(chosen map[string]db.BuildInput) []db.BuildInput {
	out := make([]db.BuildInput, 0, len(chosen))
	for _, in := range chosen {
		out = append(out, in)
	}
	return out
}

// chooseInputs runs input selection for the job. A reason instead of a
// choice means the job waits.
func (s *Scheduler) chooseInputs(ctx context.Context, st *pipelineState, j db.JobRef, inputs []Input) (map[string]db.BuildInput, string, error) {
	last, err := s.DB.LastInputs(ctx, j.ID)
	if err != nil {
		return nil, "", err
	}
	cands := make([]Candidates, 0, len(inputs))
	for _, in := range inputs {
		c, err := s.candidates(ctx, st, in, last[in.Name])
		if err != nil {
			return nil, "", fmt.Errorf("input %s: %w", in.Name, err)
		}
		cands = append(cands, c)
	}
	ids, reason := Resolve(cands)
	if reason != "" {
		return nil, reason, nil
	}
	out := map[string]db.BuildInput{}
	for _, in := range inputs {
		out[in.Name] = db.BuildInput{Name: in.Name, ResourceID: st.resources[in.Resource].ID, VersionID: ids[in.Name]}
	}
	return out, "", nil
}

// candidates lists an input's versions in order of preference.
func (s *Scheduler) candidates(ctx context.Context, st *pipelineState, in Input, lastUsed int64) (Candidates, error) {
	c := Candidates{Input: in, Passed: map[string]map[int64][]int64{}}
	r, ok := st.resources[in.Resource]
	if !ok {
		c.Reason = fmt.Sprintf("input %s: resource %s is not in the pipeline", in.Name, in.Resource)
		return c, nil
	}
	for _, job := range in.Passed {
		jobID, ok := st.jobIDs[job]
		if !ok {
			// A paused job's builds still count: look it up by name.
			jr, err := s.DB.LookupPipelineJob(ctx, r.PipelineID, job)
			if err != nil {
				c.Reason = fmt.Sprintf("input %s: passed job %s not found", in.Name, job)
				return c, nil
			}
			jobID = jr.ID
		}
		passed, err := s.DB.PassedBuilds(ctx, jobID, r.ID)
		if err != nil {
			return c, err
		}
		c.Passed[job] = passed
	}
	if pin := s.pin(st, r, in); pin != nil {
		v, err := s.DB.FindVersion(ctx, r.ID, pin)
		switch {
		case errors.Is(err, db.ErrNotFound) || (err == nil && !v.Enabled):
			b, _ := json.Marshal(pin)
			c.Reason = fmt.Sprintf("pinned version %s of resource %s not found", b, r.Name)
			return c, nil
		case err != nil:
			return c, err
		}
		c.Versions = []int64{v.ID}
		return c, nil
	}
	vs, err := s.DB.EnabledVersions(ctx, r.ID)
	if err != nil {
		return c, err
	}
	ids := make([]int64, len(vs))
	for i, v := range vs {
		ids[i] = v.ID
	}
	if in.Every && lastUsed != 0 {
		// The versions after the last one used, oldest first; then the
		// last one used and older (the job runs again only on new ones).
		at := -1
		for i, v := range vs {
			if v.ID == lastUsed {
				at = i
			}
		}
		if at >= 0 {
			newer := ids[:at]
			ordered := make([]int64, 0, len(ids))
			for i := len(newer) - 1; i >= 0; i-- {
				ordered = append(ordered, newer[i])
			}
			ids = append(ordered, ids[at:]...)
		}
	}
	c.Versions = ids
	return c, nil
}

// pin is the version an input is pinned to: through the API, in the
// resource's config, or in the get step, in that order.
func (s *Scheduler) pin(st *pipelineState, r db.ResourceRef, in Input) map[string]string {
	if r.APIPinnedVersion != nil {
		return r.APIPinnedVersion
	}
	for _, rc := range st.cfg.Resources {
		if rc.Name == r.Name && rc.Version != nil {
			return rc.Version
		}
	}
	return in.Pinned
}

// startPending starts the pipeline's pending builds that serial,
// serial_groups and max_in_flight allow, oldest first.
func (s *Scheduler) startPending(ctx context.Context, st *pipelineState, jobs []db.JobRef, configs map[int64]*concourse.JobConfig) error {
	ids := make([]int64, 0, len(jobs))
	byID := map[int64]db.JobRef{}
	for _, j := range jobs {
		ids = append(ids, j.ID)
		byID[j.ID] = j
	}
	builds, err := s.DB.UnfinishedJobBuilds(ctx, ids)
	if err != nil {
		return err
	}
	running := map[int64]int{}       // job -> started builds
	groupRunning := map[string]int{} // serial group -> started builds
	for _, b := range builds {
		if b.Status == concourse.StatusStarted {
			running[b.JobID]++
			if cfg := configs[b.JobID]; cfg != nil {
				for _, g := range cfg.SerialGroups {
					groupRunning[g]++
				}
			}
		}
	}
	// A job, or a serial group, whose oldest pending build cannot start
	// blocks its younger ones: builds start in order.
	blockedJob := map[int64]bool{}
	blockedGroup := map[string]bool{}
	var errs []error
	for _, b := range builds {
		if b.Status != concourse.StatusPending {
			continue
		}
		if b.AbortRequested {
			// Aborted since endAborted looked: nobody runs it, so it ends here.
			if err := s.abort(ctx, b); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		cfg := configs[b.JobID]
		if cfg == nil || blockedJob[b.JobID] {
			continue
		}
		ok := !anyBlocked(blockedGroup, cfg.SerialGroups)
		if ok && running[b.JobID] >= jobLimit(cfg) {
			ok = false
		}
		for _, g := range cfg.SerialGroups {
			if groupRunning[g] >= groupLimit(cfg) {
				ok = false
			}
		}
		if ok {
			started, err := s.start(ctx, st, byID[b.JobID], cfg, b)
			if err != nil {
				errs = append(errs, fmt.Errorf("job %s/%s build %s: %w", b.PipelineName, b.JobName, b.Name, err))
			}
			ok = started
		}
		if !ok {
			blockedJob[b.JobID] = true
			for _, g := range cfg.SerialGroups {
				blockedGroup[g] = true
			}
			continue
		}
		running[b.JobID]++
		for _, g := range cfg.SerialGroups {
			groupRunning[g]++
		}
	}
	return errors.Join(errs...)
}

func anyBlocked(blocked map[string]bool, groups []string) bool {
	for _, g := range groups {
		if blocked[g] {
			return true
		}
	}
	return false
}

// jobLimit is how many builds of the job may run at once (a large number
// for no limit).
func jobLimit(cfg *concourse.JobConfig) int {
	switch {
	case cfg.Serial || (len(cfg.SerialGroups) > 0 && cfg.MaxInFlight == 0):
		return 1
	case cfg.MaxInFlight > 0:
		return cfg.MaxInFlight
	}
	return int(^uint(0) >> 1)
}

// groupLimit is how many builds of a serial group may run at once.
func groupLimit(cfg *concourse.JobConfig) int {
	if cfg.MaxInFlight > 0 {
		return cfg.MaxInFlight
	}
	return 1
}

// start chooses a pending build's inputs if it has none yet, plans it and
// hands it to the Starter. It returns false when the build must wait.
func (s *Scheduler) start(ctx context.Context, st *pipelineState, j db.JobRef, cfg *concourse.JobConfig, b db.JobBuild) (bool, error) {
	inputs := JobInputs(cfg)
	if !b.InputsReady {
		chosen, reason, err := s.chooseInputs(ctx, st, j, inputs)
		if err != nil {
			return false, err
		}
		if reason != "" {
			return false, s.setWaiting(ctx, j, reason)
		}
		if err := s.DB.SaveBuildInputs(ctx, b.ID, j.ID, buildInputs(chosen)); err != nil {
			return false, err
		}
	}
	versions, err := s.DB.BuildVersions(ctx, b.ID)
	if err != nil {
		return false, err
	}
	byName := map[string]map[string]string{}
	for _, v := range versions {
		if v.Input {
			byName[v.Name] = v.Version.Version
		}
	}
	plan, err := s.plan(&st.cfg, cfg, b, byName)
	if err != nil {
		// A plan the planner refuses does not get better by waiting: the
		// build errors, and the job says why.
		now := time.Now()
		err = fmt.Errorf("plan the build: %w", err)
		return false, errors.Join(err, s.DB.SetWaitingReason(ctx, j.ID, err.Error(), now), s.Starter.FailJobBuild(ctx, b, err))
	}
	if err := s.setWaiting(ctx, j, ""); err != nil {
		return false, err
	}
	if err := s.Starter.StartJobBuild(ctx, b, plan); err != nil {
		if errors.Is(err, db.ErrConflict) {
			return true, nil
		}
		return false, err
	}
	s.Log.Info("build started", "pipeline", j.PipelineName, "job", j.Name, "build", b.Name, "id", b.ID)
	return true, nil
}

// plan is the pending build's plan: the job's config's, with the build's
// inputs, or the plan of the build it resumes, which it continues whatever
// the job's config has become since (a changed job is triggered anew).
func (s *Scheduler) plan(pipeline *concourse.Config, job *concourse.JobConfig, b db.JobBuild, inputs map[string]map[string]string) (concourse.Plan, error) {
	if b.ResumedFrom == 0 {
		return s.Planner.JobPlan(pipeline, job, inputs)
	}
	var plan concourse.Plan
	if err := json.Unmarshal(b.Plan, &plan); err != nil {
		return concourse.Plan{}, fmt.Errorf("read the plan of build %d, which it resumes: %w", b.ResumedFrom, err)
	}
	return plan, nil
}

// setWaiting records why the job waits (empty: it does not), writing only changes.
func (s *Scheduler) setWaiting(ctx context.Context, j db.JobRef, reason string) error {
	if reason == j.WaitingReason {
		return nil
	}
	if reason != "" {
		s.Log.Info("job waits", "pipeline", j.PipelineName, "job", j.Name, "reason", reason)
	}
	return s.DB.SetWaitingReason(ctx, j.ID, reason, time.Now())
}

// NextInputs is what input selection chooses for the job's next build now
// (input name -> resource and version), or the reason the job would wait.
// It reads and changes nothing else (`fly execute --inputs-from`).
func (s *Scheduler) NextInputs(ctx context.Context, j db.JobRef) (map[string]db.BuildInput, string, error) {
	var cfg concourse.JobConfig
	if err := json.Unmarshal(j.Config, &cfg); err != nil {
		return nil, "", fmt.Errorf("job %s/%s: decode its config: %w", j.PipelineName, j.Name, err)
	}
	st := pipelineState{resources: map[string]db.ResourceRef{}, jobIDs: map[string]int64{}}
	if err := json.Unmarshal(j.PipelineConfig, &st.cfg); err != nil {
		return nil, "", fmt.Errorf("pipeline %s: decode its config: %w", j.PipelineName, err)
	}
	rs, err := s.DB.PipelineResources(ctx, j.PipelineID)
	if err != nil {
		return nil, "", err
	}
	for _, r := range rs {
		st.resources[r.Name] = r
	}
	return s.chooseInputs(ctx, &st, j, JobInputs(&cfg))
}
