package exec

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/porter-ci/porter/pkg/atc/exec/buildstate"
	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// CheckStep runs a resource's check: the versions the type's check prints.
type CheckStep struct{ Plan *concourse.Plan }

func (s CheckStep) Run(ctx context.Context, x *RunState) (bool, error) {
	p := x.r.cfg.BaseResourceTypeDefaults.Apply(s.Plan)
	cp := p.Check
	d := x.delegate(p.ID)
	step := resourceStep{kind: concourse.KindCheck, name: cp.Name, typ: cp.Type, source: cp.Source, image: cp.TypeImage, tags: cp.Tags, timeout: cp.Timeout, restartable: true}
	r := x.b.Record(p.ID, cp.Name, concourse.KindCheck)
	fin, done, err := x.runResource(ctx, p, r, step, func() { d.InitializeCheck(cp.Name) }, func() (map[string]any, error) {
		source, err := x.stepVars(nil).InterpolateMap(ctx, cp.Source)
		if err != nil {
			return nil, err
		}
		req := map[string]any{"source": stepplan.NonNilMap(source), "version": nil}
		if cp.FromVersion != nil {
			req["version"] = cp.FromVersion
		}
		return req, nil
	})
	if done || fin == nil {
		return x.replayed(r, err)
	}
	if fin.GetResult() != eventspb.Result_RESULT_SUCCEEDED {
		return x.endResource(ctx, p, r, fin)
	}
	var printed []map[string]string
	if err := json.Unmarshal(fin.GetResponse(), &printed); err != nil {
		return x.failResource(ctx, p, r, fmt.Errorf("check printed JSON that is not a list of versions: %w", err))
	}
	versions := make([]buildstate.Version, 0, len(printed))
	for _, v := range printed {
		versions = append(versions, buildstate.Version{Version: v})
	}
	x.b.Update(func() {
		r.Versions = versions
		if len(versions) > 0 {
			r.Version = versions[len(versions)-1].Version
		}
	})
	if err := x.r.recordCheck(ctx, x.b, cp, versions); err != nil {
		return x.failResource(ctx, p, r, fmt.Errorf("save the versions of %s: %w", cp.Name, err))
	}
	return x.endResource(ctx, p, r, fin)
}
