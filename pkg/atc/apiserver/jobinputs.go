package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/porter-ci/porter/pkg/atc/apiserver/apierr"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/httpreply"
	"github.com/porter-ci/porter/pkg/scheduler"
)

// What `fly execute --inputs-from PIPELINE/JOB` asks of a pipeline: the
// job's next inputs and the pipeline's resource types (from which fly
// builds its own get steps), then a one-off build of the plan fly made.

// buildInput is Concourse's BuildInput: one input of a job's next build,
// with all fly needs to fetch it itself.
type buildInput struct {
	Name     string            `json:"name"`
	Resource string            `json:"resource"`
	Type     string            `json:"type"`
	Source   map[string]any    `json:"source"`
	Params   map[string]any    `json:"params,omitempty"`
	Version  map[string]string `json:"version"`
	Tags     []string          `json:"tags,omitempty"`
}

// handleJobInputs is ListJobInputs: the versions input selection would
// give the job's next build now. 404 (fly: "build inputs for P/J not
// found") when the job would wait, with the reason in the detail.
func (s *Server) handleJobInputs(w http.ResponseWriter, r *http.Request, jr jobRequest) {
	ref, err := s.store.LookupPipelineJob(r.Context(), jr.pipeline.ID, jr.job.Name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var cfg concourse.Config
	if err := json.Unmarshal(jr.pipeline.Config, &cfg); err != nil {
		s.fail(w, r, fmt.Errorf("pipeline %s: decode its config: %w", jr.pipeline.Name, err))
		return
	}
	var job concourse.JobConfig
	if err := json.Unmarshal(ref.Config, &job); err != nil {
		s.fail(w, r, fmt.Errorf("job %s: decode its config: %w", ref.Name, err))
		return
	}
	// Input selection only reads the database.
	chosen, reason, err := s.engine.NextInputs(r.Context(), ref)
	if err != nil {
		s.fail(w, r, fmt.Errorf("inputs of job %s/%s: %w", jr.pipeline.Name, ref.Name, err))
		return
	}
	if reason != "" {
		s.fail(w, r, apierr.NotFound("Inputs Not Found Error", fmt.Sprintf("job %s/%s has no inputs to run with: %s", jr.pipeline.Name, ref.Name, reason)))
		return
	}
	resources := map[string]concourse.ResourceConfig{}
	for _, rc := range cfg.Resources {
		resources[rc.Name] = rc
	}
	out := []buildInput{}
	for _, in := range scheduler.JobInputs(&job) {
		c, ok := chosen[in.Name]
		if !ok {
			continue
		}
		rc, ok := resources[in.Resource]
		if !ok {
			s.fail(w, r, fmt.Errorf("input %s: resource %s is not in pipeline %s", in.Name, in.Resource, jr.pipeline.Name))
			return
		}
		v, err := s.store.VersionByID(r.Context(), c.ResourceID, c.VersionID)
		if err != nil {
			s.fail(w, r, fmt.Errorf("input %s: version %d of %s: %w", in.Name, c.VersionID, in.Resource, err))
			return
		}
		bi := buildInput{Name: in.Name, Resource: rc.Name, Type: rc.Type, Source: rc.Source, Version: v.Version, Tags: rc.Tags}
		if bi.Source == nil {
			bi.Source = map[string]any{}
		}
		// The get step's own params and tags (the first step of that name,
		// as input selection takes).
		found := false
		job.EachStep(func(st *concourse.Step) {
			if found || st.Get != in.Name {
				return
			}
			found = true
			bi.Params = st.Params
			if len(st.Tags) > 0 {
				bi.Tags = st.Tags
			}
		})
		out = append(out, bi)
	}
	httpreply.JSON(w, http.StatusOK, out)
}

// handleResourceTypes is ListResourceTypes: the pipeline's resource_types,
// from which fly makes the image of the get steps it builds.
func (s *Server) handleResourceTypes(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
	var cfg concourse.Config
	if err := json.Unmarshal(pr.pipeline.Config, &cfg); err != nil {
		s.fail(w, r, fmt.Errorf("pipeline %s: decode its config: %w", pr.pipeline.Name, err))
		return
	}
	types := cfg.ResourceTypes
	if types == nil {
		types = []concourse.ResourceType{}
	}
	httpreply.JSON(w, http.StatusOK, types)
}

// handleCreatePipelineBuild is CreatePipelineBuild: a one-off build of
// the plan fly sends, in the pipeline's team. Porter runs it as any
// one-off build (it is not listed among the pipeline's job builds).
func (s *Server) handleCreatePipelineBuild(w http.ResponseWriter, r *http.Request, pr pipelineRequest) {
	s.createBuildFromRequest(w, r, pr.team, pr.claims.UserID, "build of pipeline "+pr.pipeline.Name)
}
