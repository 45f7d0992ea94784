package exec

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/porter-ci/porter/pkg/concourse"
)

// observed wraps the build's leaf steps in a span each.
func (x *RunState) observed(leaf func(context.Context, *concourse.Plan, Step) (bool, error)) func(context.Context, *concourse.Plan, Step) (bool, error) {
	return func(ctx context.Context, p *concourse.Plan, step Step) (bool, error) {
		span, ahead := x.aheadSpan(p.ID)
		if ahead {
			// The span began when the task's pod was declared ahead.
			ctx = trace.ContextWithSpan(ctx, span)
		} else {
			ctx, span = x.stepSpan(ctx, p)
		}
		defer span.End()
		ok, err := leaf(ctx, p, step)
		span.SetAttributes(attribute.Bool("porter.step.ok", ok))
		switch {
		case err != nil:
			span.SetStatus(codes.Error, err.Error())
		case !ok:
			span.SetStatus(codes.Error, "failed")
		}
		return ok, err
	}
}

// stepSpan opens the span of a step that runs a pod (a task, get, put or
// check, a task image's check included); other steps get a no-op span.
func (x *RunState) stepSpan(ctx context.Context, p *concourse.Plan) (context.Context, trace.Span) {
	kind, name := p.Kind(), stepName(p)
	if !kind.RunsPod() || x.r == nil || x.r.tracer == nil {
		return ctx, noop.Span{}
	}
	return x.r.tracer.Start(ctx, string(kind)+" "+name, trace.WithAttributes(
		attribute.String("porter.step.type", string(kind)), attribute.String("porter.step.name", name),
		attribute.String("porter.plan.id", string(p.ID)), attribute.Int64("porter.build.id", x.b.ID)))
}

// stepName is the name of a step that runs a pod.
func stepName(p *concourse.Plan) string {
	switch {
	case p.Task != nil:
		return p.Task.Name
	case p.Get != nil:
		return p.Get.Name
	case p.Put != nil:
		return p.Put.Name
	case p.Check != nil:
		return p.Check.Name
	}
	return ""
}
