package exec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// PutStep runs out with the build's artifacts it needs, and records the
// version it made for the implicit get that follows.
type PutStep struct{ Plan *concourse.Plan }

func (s PutStep) Run(ctx context.Context, x *RunState) (bool, error) {
	p := x.r.cfg.BaseResourceTypeDefaults.Apply(s.Plan)
	pp := p.Put
	d := x.delegate(p.ID)
	step, request := x.putStep(ctx, p)
	r := x.b.Record(p.ID, pp.Name, concourse.KindPut)
	fin, done, err := x.runResource(ctx, p, r, step, d.InitializePut, request)
	if done || fin == nil {
		return x.replayed(r, err)
	}
	if fin.GetResult() != eventspb.Result_RESULT_SUCCEEDED {
		if fin.GetResult() == eventspb.Result_RESULT_FAILED {
			d.FinishPut(int(fin.GetExitStatus()), nil, nil)
		}
		return x.endResource(ctx, p, r, fin)
	}
	var resp resourceResponse
	if err := json.Unmarshal(fin.GetResponse(), &resp); err != nil {
		return x.failResource(ctx, p, r, fmt.Errorf("out printed JSON that is not {\"version\": ..., \"metadata\": ...}: %w", err))
	}
	if len(resp.Version) == 0 {
		return x.failResource(ctx, p, r, errors.New("out printed no version"))
	}
	d.FinishPut(0, resp.Version, stepplan.EventMetadata(resp.Metadata))
	x.b.Update(func() { r.Version, r.Metadata = resp.Version, resp.Metadata })
	if err := x.r.recordBuildVersion(ctx, x.b, pp.Name, pp.Resource, buildstate.Version(resp), false); err != nil {
		return x.failResource(ctx, p, r, fmt.Errorf("record the version of %s: %w", pp.Name, err))
	}
	return x.endResource(ctx, p, r, fin)
}

// putStep is put p (its source defaults applied) as a resource step, and
// its request: its source and params, their ((vars)) filled in. Its pod may
// be declared ahead (declareResource) with them.
func (x *RunState) putStep(ctx context.Context, p *concourse.Plan) (resourceStep, func() (map[string]any, error)) {
	pp := p.Put
	step := resourceStep{kind: concourse.KindPut, name: pp.Name, typ: pp.Type, source: pp.Source, params: pp.Params, image: pp.TypeImage, tags: pp.Tags, timeout: pp.Timeout, restartable: pp.RestartOnPodLoss}
	return step, func() (map[string]any, error) {
		sv := x.stepVars(nil)
		source, err := sv.InterpolateMap(ctx, pp.Source)
		if err != nil {
			return nil, err
		}
		params, err := sv.InterpolateMap(ctx, pp.Params)
		if err != nil {
			return nil, err
		}
		return map[string]any{"source": stepplan.NonNilMap(source), "params": stepplan.NonNilMap(params)}, nil
	}
}
