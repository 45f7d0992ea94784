package atc

import (
	"maps"
	"slices"

	"github.com/porter-ci/porter/pkg/atc/exec/basetypes"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/pipeline"
)

// pipelinePlanner plans job builds and checks with pkg/pipeline, for the
// base resource types this server's workers provide.
type pipelinePlanner struct {
	baseTypes []string
}

func (p pipelinePlanner) JobPlan(cfg *concourse.Config, job *concourse.JobConfig, inputs map[string]map[string]string) (concourse.Plan, error) {
	in := make(map[string]pipeline.InputVersion, len(inputs))
	for name, v := range inputs {
		in[name] = pipeline.InputVersion{Version: v}
	}
	return pipeline.JobPlan(cfg, job, in, pipeline.PlanOptions{BaseTypes: p.baseTypes})
}

func (p pipelinePlanner) CheckPlan(cfg *concourse.Config, res *concourse.ResourceConfig, from map[string]string) (concourse.Plan, error) {
	return pipeline.CheckPlan(cfg, res, from, pipeline.PlanOptions{BaseTypes: p.baseTypes})
}

// baseTypeNames are the names of the resource types this server's workers
// provide.
func (s *Server) baseTypeNames() []string {
	types := s.cfg.BaseResourceTypes
	if types == nil {
		types = basetypes.Images()
	}
	return slices.Sorted(maps.Keys(types))
}
