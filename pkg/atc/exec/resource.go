package exec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/atc/exec/basetypes"
	"github.com/porter-ci/porter/pkg/atc/exec/stepplan"
	"github.com/porter-ci/porter/pkg/atc/kuberuntime"
	"github.com/porter-ci/porter/pkg/atc/stepevents"
	"github.com/porter-ci/porter/pkg/concourse"
	"github.com/porter-ci/porter/pkg/db"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
)

// Resource steps run Concourse's resource protocol unchanged: the type's
// image's /opt/resource/check, in or out, with the request on stdin and the
// response on stdout (the sidecar returns it in StepFinished).

const (
	resourceDir = "/tmp/build"
	getDir      = "get" // under resourceDir: what in fetches into
	putDir      = "/tmp/build/put"
	checkDir    = "/tmp/build/check"
)

// resourceStep is what check, get and put share.
type resourceStep struct {
	kind    string // check, get, put
	name    string
	typ     string
	source  map[string]any
	params  map[string]any
	image   concourse.TypeImage
	tags    []string
	timeout string
	// restartable: a pod lost under the step is replaced (stepPod).
	restartable bool
}

// resourceResponse is what in and out print.
type resourceResponse struct {
	Version  map[string]string         `json:"version"`
	Metadata []concourse.MetadataField `json:"metadata,omitempty"`
}

// check runs a check step: the versions the type's check prints.
func (x *executor) check(ctx context.Context, p *concourse.Plan) (bool, error) {
	cp := p.Check
	step := resourceStep{kind: "check", name: cp.Name, typ: cp.Type, source: cp.Source, image: cp.TypeImage, tags: cp.Tags, timeout: cp.Timeout, restartable: true}
	r := x.b.record(p.ID, cp.Name, "check")
	origin := events.Origin{ID: string(p.ID)}
	fin, done, err := x.runResource(ctx, p, r, step, func() {
		x.b.Log.Append(events.InitializeCheck{Time: time.Now().Unix(), Origin: origin, Name: cp.Name})
	}, func() (map[string]any, error) {
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
	versions := make([]resourceVersion, 0, len(printed))
	for _, v := range printed {
		versions = append(versions, resourceVersion{Version: v})
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

// get fetches a version into the build's artifact named after the step,
// from the resource cache when it holds it.
func (x *executor) get(ctx context.Context, p *concourse.Plan) (bool, error) {
	gp := p.Get
	step := resourceStep{kind: "get", name: gp.Name, typ: gp.Type, source: gp.Source, params: gp.Params, image: gp.TypeImage, tags: gp.Tags, timeout: gp.Timeout, restartable: true}
	r := x.b.record(p.ID, gp.Name, "get")
	origin := events.Origin{ID: string(p.ID)}
	var (
		version        map[string]string
		cached         *db.ResourceCache
		source, params map[string]any // with their ((vars)) filled in
	)
	initialize := func() {
		x.b.Log.Append(events.InitializeGet{Time: time.Now().Unix(), Origin: origin})
	}
	fin, done, err := x.runResource(ctx, p, r, step, initialize, func() (map[string]any, error) {
		v, err := x.getVersion(gp)
		if err != nil {
			return nil, err
		}
		version = v
		sv := x.stepVars(nil)
		if source, err = sv.InterpolateMap(ctx, gp.Source); err != nil {
			return nil, err
		}
		if params, err = sv.InterpolateMap(ctx, gp.Params); err != nil {
			return nil, err
		}
		return map[string]any{"source": stepplan.NonNilMap(source), "version": v, "params": stepplan.NonNilMap(params)}, nil
	}, withCache(func(image string) (bool, error) {
		key, err := db.ResourceCacheKey(x.b.TeamID, gp.Type, image, stepplan.NonNilMap(source), stepplan.NonNilMap(params), version)
		if err != nil {
			return false, err
		}
		x.b.Update(func() { r.CacheKey = key })
		c, err := x.r.db.ResourceCache(ctx, key)
		switch {
		case errors.Is(err, db.ErrNotFound):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("look up the resource cache: %w", err)
		}
		// The artifacts' lifecycle is the store's: a cache whose artifact
		// is gone is fetched again (and stored anew).
		if _, err := x.r.store.Stat(ctx, c.Artifact); err != nil {
			x.r.log.Info("resource cache without its artifact; fetching again", "key", key, "artifact", c.Artifact, "err", err)
			return false, nil
		}
		cached = &c
		return true, nil
	}))
	if done {
		var rec StepRecord
		x.b.Update(func() { rec = *r })
		if rec.Status == concourse.StatusSucceeded {
			x.noteFetched(gp, rec.Version)
		}
		return x.replayed(r, err)
	}
	if cached != nil {
		var md []concourse.MetadataField
		_ = json.Unmarshal(cached.Metadata, &md)
		resp, _ := json.Marshal(resourceResponse{Version: cached.Version, Metadata: md})
		fin = &eventspb.StepFinished{Result: eventspb.Result_RESULT_SUCCEEDED, Response: resp,
			Outputs: []*eventspb.ArtifactUploaded{{Name: gp.Name, Key: cached.Artifact, Digest: cached.Digest, Size: cached.Size}}}
		x.r.log.Info("get from the resource cache", "build", x.b.ID, "step", gp.Name, "version", cached.Version)
	}
	if fin == nil {
		return x.replayed(r, err)
	}
	if fin.GetResult() != eventspb.Result_RESULT_SUCCEEDED {
		if fin.GetResult() == eventspb.Result_RESULT_FAILED {
			x.b.Log.Append(events.FinishGet{Time: time.Now().Unix(), Origin: origin, ExitStatus: int(fin.GetExitStatus())})
		}
		return x.endResource(ctx, p, r, fin)
	}
	var resp resourceResponse
	if err := json.Unmarshal(fin.GetResponse(), &resp); err != nil {
		return x.failResource(ctx, p, r, fmt.Errorf("in printed JSON that is not {\"version\": ..., \"metadata\": ...}: %w", err))
	}
	if resp.Version == nil {
		resp.Version = version
	}
	x.b.Log.Append(events.FinishGet{Time: time.Now().Unix(), Origin: origin, ExitStatus: 0,
		Version: resp.Version, Metadata: stepplan.EventMetadata(resp.Metadata)})
	art, ok := stepplan.OutputOf(fin, gp.Name)
	if !ok {
		return x.failResource(ctx, p, r, fmt.Errorf("get %q stored no artifact", gp.Name))
	}
	x.b.Update(func() {
		r.Version, r.Metadata = resp.Version, resp.Metadata
		r.Outputs = map[string]api.ArtifactRef{gp.Name: art}
	})
	x.setArtifact(gp.Name, art)
	x.noteFetched(gp, resp.Version)
	if cached == nil {
		x.saveResourceCache(ctx, r, gp, art, resp)
	}
	if err := x.r.recordBuildVersion(ctx, x.b, gp.Name, gp.Resource, resourceVersion(resp), true); err != nil {
		return x.failResource(ctx, p, r, fmt.Errorf("record the version of %s: %w", gp.Name, err))
	}
	return x.endResource(ctx, p, r, fin)
}

// put runs out with the build's artifacts it needs, and records the
// version it made for the implicit get that follows.
func (x *executor) put(ctx context.Context, p *concourse.Plan) (bool, error) {
	pp := p.Put
	step := resourceStep{kind: "put", name: pp.Name, typ: pp.Type, source: pp.Source, params: pp.Params, image: pp.TypeImage, tags: pp.Tags, timeout: pp.Timeout, restartable: pp.RestartOnPodLoss}
	r := x.b.record(p.ID, pp.Name, "put")
	origin := events.Origin{ID: string(p.ID)}
	fin, done, err := x.runResource(ctx, p, r, step, func() {
		x.b.Log.Append(events.InitializePut{Time: time.Now().Unix(), Origin: origin})
	}, func() (map[string]any, error) {
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
	})
	if done || fin == nil {
		return x.replayed(r, err)
	}
	if fin.GetResult() != eventspb.Result_RESULT_SUCCEEDED {
		if fin.GetResult() == eventspb.Result_RESULT_FAILED {
			x.b.Log.Append(events.FinishPut{Time: time.Now().Unix(), Origin: origin, ExitStatus: int(fin.GetExitStatus())})
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
	x.b.Log.Append(events.FinishPut{Time: time.Now().Unix(), Origin: origin, ExitStatus: 0,
		Version: resp.Version, Metadata: stepplan.EventMetadata(resp.Metadata)})
	x.b.Update(func() { r.Version, r.Metadata = resp.Version, resp.Metadata })
	if err := x.r.recordBuildVersion(ctx, x.b, pp.Name, pp.Resource, resourceVersion(resp), false); err != nil {
		return x.failResource(ctx, p, r, fmt.Errorf("record the version of %s: %w", pp.Name, err))
	}
	return x.endResource(ctx, p, r, fin)
}

// getVersion is the version a get fetches: its own, or the one an earlier
// put or check of the build recorded.
func (x *executor) getVersion(gp *concourse.GetPlan) (map[string]string, error) {
	if gp.VersionFrom == nil {
		if gp.Version == nil {
			return nil, fmt.Errorf("get %q has no version to fetch (neither version nor version_from)", gp.Name)
		}
		return gp.Version, nil
	}
	var v map[string]string
	x.b.Update(func() {
		if rec, ok := x.b.State.Steps[*gp.VersionFrom]; ok {
			v = rec.Version
		}
	})
	if v == nil {
		return nil, fmt.Errorf("get %q: step %s, whose version it fetches, recorded none", gp.Name, *gp.VersionFrom)
	}
	return v, nil
}

func (x *executor) saveResourceCache(ctx context.Context, r *StepRecord, gp *concourse.GetPlan, art api.ArtifactRef, resp resourceResponse) {
	var key string
	x.b.Update(func() { key = r.CacheKey })
	if key == "" {
		return
	}
	md, _ := json.Marshal(resp.Metadata)
	err := x.r.retryDB(ctx, "save the resource cache", func(ctx context.Context) error {
		var resourceID int64
		if gp.Resource != "" {
			id, err := x.r.db.BuildResourceID(ctx, x.b.ID, gp.Resource)
			if err != nil {
				return err
			}
			resourceID = id
		}
		return x.r.db.SaveResourceCache(ctx, db.ResourceCache{Key: key, TeamID: x.b.TeamID, ResourceID: resourceID,
			Artifact: art.Key, Digest: art.Digest, Size: art.Size, Version: resp.Version, Metadata: md})
	})
	if err != nil {
		// The get succeeded; only the next one will fetch again.
		x.r.log.Warn("save resource cache", "build", x.b.ID, "step", gp.Name, "err", err)
	}
}

// resourceOption adjusts runResource.
type resourceOption func(*resourceRun)

type resourceRun struct {
	// cache, for a get, says whether the resource cache holds the version
	// (for the resolved image); then no pod runs.
	cache func(image string) (bool, error)
	// noWorkerEvent leaves out the selected-worker event (an image check).
	noWorkerEvent bool
}

func withCache(f func(image string) (bool, error)) resourceOption {
	return func(r *resourceRun) { r.cache = f }
}

func withoutWorkerEvent() resourceOption {
	return func(r *resourceRun) { r.noWorkerEvent = true }
}

// runResource runs a resource step's pod, or follows it again after a
// restart. done says the step had already finished (err is its outcome);
// otherwise fin is how the pod ended (nil: the server is stopping, err
// says why; or a cache hit, left to the caller).
func (x *executor) runResource(ctx context.Context, p *concourse.Plan, r *StepRecord, step resourceStep,
	initialize func(), request func() (map[string]any, error), opts ...resourceOption,
) (fin *eventspb.StepFinished, done bool, err error) {
	var o resourceRun
	for _, opt := range opts {
		opt(&o)
	}
	s, b := x.r, x.b
	var (
		rec      StepRecord
		finished bool
	)
	b.Update(func() { rec, finished = *r, r.finished() })
	if finished {
		_, err := x.replay(rec)
		return nil, true, err
	}
	attempt := 1
	if rec.StepID != "" {
		// The credentials the step read are redacted again from what its
		// pod still logs (the redactions died with the previous server).
		_, _ = request()
		w, err := s.pods.Worker(rec.Worker)
		if err != nil {
			return x.podEnded(ctx, r, s.registerResourceStep(b, nil, rec.StepID, p.ID, step.kind), Errored(err.Error()))
		}
		if !x.restartGone(ctx, p, w, rec, step.restartable) {
			st := s.registerResourceStep(b, w, rec.StepID, p.ID, step.kind)
			fin = s.resumeStep(ctx, w, st, rec.StepID)
			return x.podEnded(ctx, r, st, fin)
		}
		attempt = max(rec.Attempt, 1) + 1
	}

	initialize()
	a, stdin, err := x.resolveResource(ctx, p, step, request)
	if err == nil && o.cache != nil {
		var hit bool
		hit, err = o.cache(a.Image)
		if err == nil && hit {
			return nil, false, nil
		}
	}
	var w *kuberuntime.Worker
	if err == nil {
		w, err = s.placeStep(ctx, b, events.Origin{ID: string(p.ID)}, privilegedRequirements(requirements(b.Team, step.tags, "", false), step.image.Privileged))
		if ctx.Err() != nil {
			_, err := x.stoppedWaiting(ctx, r)
			return nil, true, err
		}
	}
	if err != nil {
		_, err = x.failResource(ctx, p, r, err)
		return nil, true, err
	}
	if img, ok := w.Config().BaseResourceTypes[step.image.BaseType]; ok && step.image.CheckPlan == nil && step.image.GetPlan == nil {
		a.Image = img // the worker provides its own image of the base type
	}
	if !o.noWorkerEvent {
		b.Log.Append(events.SelectedWorker{Time: time.Now().Unix(), Origin: events.Origin{ID: string(p.ID)}, WorkerName: w.Name()})
	}
	if s.checkPods.pooled(a) {
		fin := x.runPooledCheck(ctx, p, r, w, a, stdin, step.name)
		if fin == nil {
			return nil, false, interrupted(ctx)
		}
		x.pooledCheckEnded(p, r, fin)
		return fin, false, nil
	}
	st, fin, err := x.runStepPod(ctx, p, stepPod{record: r, worker: w, action: a, restartable: step.restartable, attempt: attempt,
		container: db.Container{TeamID: b.TeamID, BuildID: b.ID, BuildName: b.Name, PlanID: string(p.ID),
			StepName: step.name, Type: step.kind, WorkerName: w.Name(), Namespace: w.Namespace(), WorkingDirectory: a.WorkDir},
		secrets:  podspec.Secrets{Stdin: stdin},
		register: func(id string) *StepState { return s.registerResourceStep(b, w, id, p.ID, step.kind) }})
	if err != nil {
		return nil, true, err
	}
	return x.podEnded(ctx, r, st, fin)
}

// podEnded shows a pod's error and lets its pod go; the record is written
// by endResource once the response is taken in.
func (x *executor) podEnded(ctx context.Context, r *StepRecord, st *StepState, fin *eventspb.StepFinished) (*eventspb.StepFinished, bool, error) {
	if fin == nil {
		return nil, false, interrupted(ctx)
	}
	shown := st.endEvents(fin, time.Now().Unix())
	for _, ev := range shown {
		x.b.Log.Append(ev)
	}
	x.b.Update(func() {
		r.AuditKey = fin.GetAuditKey()
		if fin.GetExitStatus() >= 0 {
			code := int(fin.GetExitStatus())
			r.ExitStatus = &code
		}
	})
	x.r.retire(st.id)
	return fin, false, nil
}

// replayed is the outcome of a step that ended earlier (or could not start).
func (x *executor) replayed(r *StepRecord, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	var rec StepRecord
	x.b.Update(func() { rec = *r })
	return stepOutcome(rec.Status, rec.Error)
}

// endResource records how the step ended.
func (x *executor) endResource(ctx context.Context, p *concourse.Plan, r *StepRecord, fin *eventspb.StepFinished) (bool, error) {
	status := buildStatus(fin.GetResult())
	x.b.Update(func() { r.Status, r.Error, r.EndTime = status, fin.GetError(), time.Now().Unix() })
	x.r.SaveState(ctx, x.b)
	if cause := context.Cause(ctx); cause != nil && status == concourse.StatusAborted {
		return false, cause
	}
	return stepOutcome(status, fin.GetError())
}

// failResource ends the step as errored with err shown in the build.
func (x *executor) failResource(ctx context.Context, p *concourse.Plan, r *StepRecord, err error) (bool, error) {
	if errors.Is(err, ErrAborted) || errors.Is(err, ErrShutdown) || errors.Is(err, ErrTimeout) {
		return false, err
	}
	x.b.Log.Append(events.Error{Time: time.Now().Unix(), Origin: events.Origin{ID: string(p.ID)}, Message: err.Error()})
	x.b.Update(func() { r.Status, r.Error, r.EndTime = concourse.StatusErrored, err.Error(), time.Now().Unix() })
	x.r.SaveState(ctx, x.b)
	return false, err
}

// resolveResource turns a resource step into an action.
// The request is returned apart: it travels in the step's Secret, as the
// source may hold credentials.
func (x *executor) resolveResource(ctx context.Context, p *concourse.Plan, step resourceStep, request func() (map[string]any, error)) (*action.Action, []byte, error) {
	if err := x.r.pods.CheckPlacement(privilegedRequirements(requirements(x.b.Team, step.tags, "", false), step.image.Privileged)); err != nil {
		return nil, nil, err
	}
	var timeout time.Duration
	if step.timeout != "" {
		var err error
		if timeout, err = stepplan.PositiveDuration(step.timeout); err != nil {
			return nil, nil, fmt.Errorf("timeout: %w", err)
		}
	}
	image, err := x.resourceImage(ctx, step)
	if err != nil {
		return nil, nil, err
	}
	req, err := request()
	if err != nil {
		return nil, nil, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %q: request: %w", step.kind, step.name, err)
	}
	if len(body) > podspec.MaxSecretStdin {
		return nil, nil, fmt.Errorf("%s %q: the request (source, version and params) is %d bytes; at most %d fit in the step's Secret",
			step.kind, step.name, len(body), podspec.MaxSecretStdin)
	}
	b := x.b
	name := step.name
	if name == "" {
		name = step.kind
	}
	a := &action.Action{
		StepID:   fmt.Sprintf("b%d-%s-%s", b.ID, podspec.LabelValue(strings.ToLower(name)), randomSuffix()),
		Build:    action.Build{ID: fmt.Sprint(b.ID), Name: b.Name, Team: b.Team, AuditID: b.AuditID()},
		StepName: name,
		Type:     step.kind,
		Tags:     step.tags,
		Image:    image,
		// Resource type images are pinned or built locally: pulled once.
		ImagePullPolicy: string(corev1.PullIfNotPresent),
		Privileged:      step.image.Privileged,
		Timeout:         action.Duration{Duration: timeout},
		KeepAlive:       action.Duration{Duration: x.r.cfg.KeepAlive},
		StdinSecret:     true,
	}
	switch step.kind {
	case "check":
		a.WorkDir = checkDir
		a.Run = action.Run{Path: "/opt/resource/check"}
	case "get":
		a.WorkDir = resourceDir
		a.Run = action.Run{Path: "/opt/resource/in", Args: []string{resourceDir + "/" + getDir}}
		a.Outputs = []action.Output{{Name: name, Path: getDir}}
		a.Params = x.resourceEnv()
	case "put":
		a.WorkDir = putDir
		a.Run = action.Run{Path: "/opt/resource/out", Args: []string{putDir}}
		a.Params = x.resourceEnv()
		inputs, err := x.putInputs(p.Put)
		if err != nil {
			return nil, nil, err
		}
		a.Inputs = inputs
	}
	if err := a.Validate(); err != nil {
		return nil, nil, err
	}
	return a, body, nil
}

// resourceEnv is the environment Concourse gives in and out.
func (x *executor) resourceEnv() map[string]string {
	return map[string]string{
		"BUILD_ID":         fmt.Sprint(x.b.ID),
		"BUILD_NAME":       x.b.Name,
		"BUILD_TEAM_NAME":  x.b.Team,
		"ATC_EXTERNAL_URL": x.r.cfg.ExternalURL,
	}
}

// putInputs are the artifacts a put gets: all of the build's, the ones its
// params name ("detect", the default) or a list.
func (x *executor) putInputs(pp *concourse.PutPlan) ([]action.Input, error) {
	x.mu.Lock()
	all := maps.Clone(x.artifacts)
	x.mu.Unlock()
	var names []string
	raw := strings.TrimSpace(string(pp.Inputs))
	switch raw {
	case "", "null", `"detect"`:
		seen := map[string]bool{}
		stepplan.DetectInputs(pp.Params, func(name string) {
			if _, ok := all[name]; ok && !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		})
	case `"all"`:
		names = slices.Collect(maps.Keys(all))
	default:
		if err := json.Unmarshal(pp.Inputs, &names); err != nil {
			return nil, fmt.Errorf("put %q: inputs must be \"all\", \"detect\" or a list of names: %s", pp.Name, raw)
		}
		var missing []string
		for _, n := range names {
			if _, ok := all[n]; !ok {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("put %q: missing inputs: %s", pp.Name, strings.Join(missing, ", "))
		}
	}
	sort.Strings(names)
	var inputs []action.Input
	for _, n := range names {
		a := all[n]
		inputs = append(inputs, action.Input{Name: n, Path: n, Key: a.Key, Digest: a.Digest})
	}
	return inputs, nil
}

// resourceImage is the image a resource step runs: a base type's from the
// server's configuration, or a custom type's, found by checking its own
// resource (a registry-image-like type: source.repository at the checked
// version's digest).
func (x *executor) resourceImage(ctx context.Context, step resourceStep) (string, error) {
	ti := step.image
	// A pipeline's own type names the base type at the bottom of its chain
	// too; its image is the one its check finds.
	if ti.BaseType != "" && ti.CheckPlan == nil && ti.GetPlan == nil {
		types := x.r.cfg.BaseResourceTypes
		if types == nil {
			types = basetypes.Images()
		}
		image, ok := types[ti.BaseType]
		if !ok {
			return "", fmt.Errorf("resource type %q: this server has no image for it (known base types: %s; add one with --base-resource-type NAME=IMAGE)",
				ti.BaseType, strings.Join(slices.Sorted(maps.Keys(types)), ", "))
		}
		return image, nil
	}
	var (
		source  map[string]any
		version map[string]string
		typ     string
	)
	if ti.GetPlan != nil && ti.GetPlan.Get != nil {
		source, version, typ = ti.GetPlan.Get.Source, ti.GetPlan.Get.Version, ti.GetPlan.Get.Type
	}
	if version == nil && ti.CheckPlan != nil {
		if ti.CheckPlan.Check == nil {
			return "", fmt.Errorf("resource type %q: its image's check plan is not a check", step.typ)
		}
		ok, err := x.run(ctx, ti.CheckPlan)
		if err != nil {
			return "", fmt.Errorf("check the image of resource type %q: %w", step.typ, err)
		}
		if !ok {
			return "", fmt.Errorf("check the image of resource type %q failed", step.typ)
		}
		x.b.Update(func() {
			if rec, ok := x.b.State.Steps[ti.CheckPlan.ID]; ok {
				version = rec.Version
			}
		})
		if source == nil {
			source, typ = ti.CheckPlan.Check.Source, ti.CheckPlan.Check.Type
		}
		if version == nil {
			return "", fmt.Errorf("resource type %q: the check of its image found no version", step.typ)
		}
	}
	if version == nil {
		return "", fmt.Errorf("resource type %q has no image (neither a base type nor a check of its own)", step.typ)
	}
	source, err := x.stepVars(nil).InterpolateMap(ctx, source)
	if err != nil {
		return "", fmt.Errorf("resource type %q: source: %w", step.typ, err)
	}
	repo, _ := source["repository"].(string)
	digest := version["digest"]
	if repo == "" || !strings.HasPrefix(digest, "sha256:") {
		return "", fmt.Errorf("resource type %q: its image comes from a %q resource, but only registry-image-like types (source.repository and a version with a sha256 digest) can give an image", step.typ, typ)
	}
	return repo + "@" + digest, nil
}

// registerResourceStep is registerStep for a resource step: its events
// are translated as the step's kind.
func (s *Runner) registerResourceStep(b *Build, w *kuberuntime.Worker, id string, planID concourse.PlanID, kind string) *StepState {
	st := &StepState{id: id, worker: w, b: b, ev: stepevents.Translator{PlanID: planID, Kind: kind}, finished: make(chan *eventspb.StepFinished, 1)}
	s.engine.RegisterStep(st)
	return st
}
