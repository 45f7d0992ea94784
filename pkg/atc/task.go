package atc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/porter-ci/porter/pkg/action"
	"github.com/porter-ci/porter/pkg/api"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/events"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/podspec"
	"github.com/porter-ci/porter/pkg/taskconfig"
)

// badRequest marks errors in what the client sent (HTTP 400).
type badRequest struct{ error }

// resolvedTask is a task step checked and turned into an action.
type resolvedTask struct {
	action      *action.Action
	eventConfig events.TaskConfig
	// outputNames maps an output's path to its name in the build.
	outputNames map[string]string
}

// resolveTask validates a task step the way Concourse does before anything
// runs: a bad config or an input nobody provides fails here, before any pod
// exists.
func (s *Server) resolveTask(buildID int64, team string, req api.TaskStep) (*resolvedTask, error) {
	cfg, err := taskconfig.Parse([]byte(req.Config))
	if err != nil {
		return nil, badRequest{fmt.Errorf("task config: %w", err)}
	}
	taskconfig.ApplyInputMapping(cfg, req.InputMapping)
	taskconfig.ApplyOutputMapping(cfg, req.OutputMapping)
	provided := map[string]bool{}
	for name := range req.Inputs {
		provided[name] = true
	}
	if missing := taskconfig.MissingInputs(cfg, provided, nil); len(missing) > 0 {
		return nil, badRequest{fmt.Errorf("missing inputs: %s", strings.Join(missing, ", "))}
	}
	known := map[string]bool{}
	for _, in := range cfg.Inputs {
		known[in.Name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(req.Inputs)) {
		if !known[name] {
			return nil, badRequest{fmt.Errorf("unknown input %q: the task has no such input", name)}
		}
	}
	image := req.Image
	if image == "" {
		if image, err = cfg.ImageRef(); err != nil {
			return nil, badRequest{fmt.Errorf("task config: %w", err)}
		}
	}
	var timeout time.Duration
	if req.Timeout != "" {
		if timeout, err = time.ParseDuration(req.Timeout); err != nil || timeout <= 0 {
			return nil, badRequest{fmt.Errorf("timeout %q is not a positive duration like \"30m\"", req.Timeout)}
		}
	}
	name := req.Name
	if name == "" {
		name = "one-off"
	}
	stepID := fmt.Sprintf("b%d-%s-%s", buildID, podspec.LabelValue(strings.ToLower(name)), randomSuffix())
	a := &action.Action{
		StepID:   stepID,
		Build:    action.Build{ID: fmt.Sprint(buildID), Name: fmt.Sprint(buildID), Team: team},
		StepName: name, Type: "task", Image: image,
		Run:        action.Run{Path: cfg.Run.Path, Args: cfg.Run.Args, Dir: cfg.Run.Dir, User: cfg.Run.User},
		Params:     taskconfig.MergeParams(cfg.Params, req.Params),
		WorkDir:    "/tmp/build/" + randomSuffix(),
		Limits:     cfg.ActionLimits(),
		Privileged: req.Privileged,
		Timeout:    action.Duration{Duration: timeout},
		KeepAlive:  action.Duration{Duration: s.cfg.KeepAlive},
	}
	outputNames := map[string]string{}
	for _, in := range cfg.Inputs {
		ref, ok := req.Inputs[in.Name]
		a.Inputs = append(a.Inputs, action.Input{Name: in.Name, Path: in.DirPath(), Key: ref.Key, Digest: ref.Digest, Optional: in.Optional && !ok})
	}
	for _, out := range cfg.Outputs {
		a.Outputs = append(a.Outputs, action.Output{Name: out.Name, Path: out.DirPath()})
		outputNames[out.DirPath()] = out.Name
	}
	for _, c := range cfg.Caches {
		a.Caches = append(a.Caches, action.Cache{Path: c.Path, Key: blobstore.TaskCacheKey(team, "", "", name, c.Path)})
	}
	if err := a.Validate(); err != nil {
		return nil, badRequest{err}
	}
	return &resolvedTask{action: a, eventConfig: taskEventConfig(cfg, image), outputNames: outputNames}, nil
}

func randomSuffix() string {
	b := make([]byte, 3)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// CreateBuild validates a one-off task build, records it and starts it.
func (s *Server) CreateBuild(ctx context.Context, req api.CreateBuildRequest) (api.Build, error) {
	team := req.Team
	if team == "" {
		team = s.cfg.Team
	}
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.mu.Unlock()
	task, err := s.resolveTask(id, team, req.Task)
	if err != nil {
		return api.Build{}, err
	}
	now := time.Now().Unix()
	b := &build{
		info: api.Build{ID: id, Name: fmt.Sprint(id), Team: team, Status: api.StatusPending, CreatedAt: now,
			Steps: []api.Step{{ID: task.action.StepID, Name: task.action.StepName, Type: "task",
				Pod: podspec.Name(task.action.StepID), Status: api.StatusPending}}},
		task:    &taskRecord{StepID: task.action.StepID, EventConfig: task.eventConfig, KeepAlive: s.cfg.KeepAlive},
		log:     newBuildLog(s.store, buildEventsPrefix(id), s.log.With("build", id)),
		abortCh: make(chan struct{}),
		done:    make(chan struct{}),
	}
	if err := s.saveBuild(ctx, b); err != nil {
		return api.Build{}, err
	}
	s.mu.Lock()
	s.builds[id] = b
	s.mu.Unlock()
	st := s.registerStep(b, task.action.StepID, task.eventConfig)

	// The build outlives the request that created it.
	runCtx := context.WithoutCancel(ctx)
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		go b.log.run(runCtx)
		s.startTask(runCtx, b, st, task)
	}()
	return b.snapshot(), nil
}

// startTask creates the step's Secret and pod, then supervises the step.
func (s *Server) startTask(ctx context.Context, b *build, st *stepState, task *resolvedTask) {
	a := task.action
	origin := events.Origin{ID: st.id}
	b.log.appendEvent(events.Status{Status: events.StatusStarted, Time: time.Now().Unix()}, "", 0)
	b.log.appendEvent(events.InitializeTask{Time: time.Now().Unix(), Origin: origin, Config: task.eventConfig}, "", 0)
	b.log.appendEvent(events.SelectedWorker{Time: time.Now().Unix(), Origin: origin, WorkerName: s.cfg.Worker}, "", 0)
	b.mu.Lock()
	b.info.Status, b.info.StartTime = api.StatusStarted, time.Now().Unix()
	b.info.Steps[0].Status = api.StatusStarted
	b.mu.Unlock()
	if err := s.saveBuild(ctx, b); err != nil {
		s.log.Warn("save build", "build", b.info.ID, "err", err)
	}
	if err := s.createPod(ctx, a); err != nil {
		s.finishStep(ctx, b, st, &eventspb.StepFinished{Result: eventspb.Result_RESULT_ERRORED, ExitStatus: -1, Error: err.Error()})
		return
	}
	s.superviseTask(ctx, b, st)
}

// createPod creates the Secret, then the pod in one call, then ties the
// Secret's lifetime to the pod.
func (s *Server) createPod(ctx context.Context, a *action.Action) error {
	token, err := s.keys.Mint(a.StepID, a.Timeout.Duration+a.KeepAlive.Duration+24*time.Hour)
	if err != nil {
		return err
	}
	pod, secret, err := podspec.Build(a, s.worker, podspec.Secrets{
		StepToken: token, ATCCA: s.caPEM,
		BlobstoreAccessKey: s.cfg.Blobstore.AccessKey, BlobstoreSecretKey: s.cfg.Blobstore.SecretKey,
	})
	if err != nil {
		return fmt.Errorf("declare the step's pod: %w", err)
	}
	secrets := s.kube.CoreV1().Secrets(s.cfg.Namespace)
	if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the step's secret: %w", err)
	}
	created, err := s.kube.CoreV1().Pods(s.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		_ = secrets.Delete(context.WithoutCancel(ctx), secret.Name, metav1.DeleteOptions{})
		return fmt.Errorf("create the step's pod: %w", err)
	}
	patch, err := podspec.OwnerPatch(created)
	if err == nil {
		_, err = secrets.Patch(ctx, secret.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		// The pod runs either way; without the owner the Secret is deleted with the pod by us.
		s.log.Warn("could not tie the step's secret to its pod", "step", a.StepID, "err", err)
	}
	s.log.Info("step pod created", "step", a.StepID, "pod", created.Name, "image", a.Image)
	s.writePodAudit(ctx, a, created)
	return nil
}

// writePodAudit records the pod as declared (not its changing status) in the
// step's audit trail: where and how the step ran.
func (s *Server) writePodAudit(ctx context.Context, a *action.Action, pod *corev1.Pod) {
	declared := pod.DeepCopy()
	declared.Status = corev1.PodStatus{}
	declared.ManagedFields = nil
	body, err := yaml.Marshal(declared)
	if err == nil {
		key := blobstore.StepPrefix(a.Build.ID, a.StepID) + blobstore.PodObject
		_, err = s.store.Put(ctx, key, bytes.NewReader(body), int64(len(body)), blobstore.PutOptions{ContentType: "application/yaml"})
	}
	if err != nil {
		s.log.Warn("audit pod spec", "step", a.StepID, "err", err)
	}
}

// superviseTask waits for the step to end: its sidecar reports, Kubernetes
// says it cannot succeed, or a person aborts it.
func (s *Server) superviseTask(ctx context.Context, b *build, st *stepState) {
	tracker := s.pods.Track(st.id)
	defer tracker.Stop()
	var podEnded, abortGiveUp <-chan time.Time
	abortCh := b.abortCh
	aborting := false
	for {
		select {
		case fin := <-st.finished:
			s.finishStep(ctx, b, st, fin)
			return
		case err := <-tracker.Failed():
			s.deletePod(ctx, st.id)
			result := eventspb.Result_RESULT_ERRORED
			if aborting {
				result = eventspb.Result_RESULT_ABORTED
			}
			s.finishStep(ctx, b, st, &eventspb.StepFinished{Result: result, ExitStatus: -1, Error: err.Error()})
			return
		case end := <-tracker.Ended():
			// The sidecar's last events may still be on their way.
			s.log.Info("step pod ended", "step", st.id, "phase", end.Phase, "reason", end.Reason)
			if podEnded == nil {
				podEnded = time.After(15 * time.Second)
			}
		case <-podEnded:
			s.finishStep(ctx, b, st, &eventspb.StepFinished{Result: eventspb.Result_RESULT_ERRORED, ExitStatus: -1,
				Error: fmt.Sprintf("pod %s ended without its sidecar reporting the step's end", podspec.Name(st.id))})
			return
		case <-abortCh:
			aborting, abortCh = true, nil
			if err := s.streams.Abort(st.id, "aborted"); err != nil {
				// Nobody in the pod to tell: stopping the pod is all that is left.
				s.deletePod(ctx, st.id)
				s.finishStep(ctx, b, st, &eventspb.StepFinished{Result: eventspb.Result_RESULT_ABORTED, ExitStatus: -1})
				return
			}
			abortGiveUp = time.After(30 * time.Second)
		case <-abortGiveUp:
			s.deletePod(ctx, st.id)
			s.finishStep(ctx, b, st, &eventspb.StepFinished{Result: eventspb.Result_RESULT_ABORTED, ExitStatus: -1})
			return
		case <-ctx.Done():
			return // shutting down: the build resumes on the next start
		}
	}
}

func (s *Server) deletePod(ctx context.Context, stepID string) {
	grace := int64(0)
	err := s.kube.CoreV1().Pods(s.cfg.Namespace).Delete(context.WithoutCancel(ctx), podspec.Name(stepID), metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		s.log.Warn("delete step pod", "step", stepID, "err", err)
	}
}

// buildStatus is the build status a step result gives.
func buildStatus(r eventspb.Result) string {
	switch r {
	case eventspb.Result_RESULT_SUCCEEDED:
		return api.StatusSucceeded
	case eventspb.Result_RESULT_FAILED:
		return api.StatusFailed
	case eventspb.Result_RESULT_ABORTED:
		return api.StatusAborted
	}
	return api.StatusErrored
}

// finishStep records how the step ended and ends the build with it.
func (s *Server) finishStep(ctx context.Context, b *build, st *stepState, fin *eventspb.StepFinished) {
	status := buildStatus(fin.GetResult())
	if fin.GetError() != "" && fin.GetResult() != eventspb.Result_RESULT_SUCCEEDED {
		st.mu.Lock()
		shown := fin.GetError() != st.lastError
		st.lastError = fin.GetError()
		st.mu.Unlock()
		if shown {
			b.log.appendEvent(events.Error{Message: fin.GetError(), Origin: events.Origin{ID: st.id}, Time: time.Now().Unix()}, "", 0)
		}
	}
	now := time.Now().Unix()
	b.log.appendEvent(events.Status{Status: events.BuildStatus(status), Time: now}, "", 0)

	b.mu.Lock()
	b.info.Status, b.info.EndTime = status, now
	step := &b.info.Steps[0]
	step.Status, step.Error, step.AuditKey = status, fin.GetError(), fin.GetAuditKey()
	if fin.GetExitStatus() >= 0 {
		code := int(fin.GetExitStatus())
		step.ExitStatus = &code
	}
	if len(fin.GetOutputs()) > 0 {
		step.Outputs = map[string]api.ArtifactRef{}
		for _, o := range fin.GetOutputs() {
			step.Outputs[o.GetName()] = api.ArtifactRef{Key: o.GetKey(), Digest: o.GetDigest(), Size: o.GetSize()}
		}
	}
	b.mu.Unlock()

	syncCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := b.log.sync(syncCtx, b.log.lastID()); err != nil {
		s.log.Error("build log not durable", "build", b.info.ID, "err", err)
	}
	if err := s.saveBuild(syncCtx, b); err != nil {
		s.log.Error("save build", "build", b.info.ID, "err", err)
	}
	s.writeBuildAudit(syncCtx, b)
	b.log.finish()
	s.log.Info("build finished", "build", b.info.ID, "status", status, "error", fin.GetError())

	// Keep the pod for kubectl logs (and intercept) for a while, then remove it.
	keep := max(s.cfg.PodRetention, s.cfg.KeepAlive)
	time.AfterFunc(keep, func() {
		s.deletePod(context.Background(), st.id)
		s.streams.Forget(st.id)
	})
	close(b.done)
}

// writeBuildAudit writes builds/<id>/build.json once, when the build ends.
func (s *Server) writeBuildAudit(ctx context.Context, b *build) {
	info := b.snapshot()
	body, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return
	}
	key := blobstore.BuildPrefix(info.Name) + "build.json"
	if _, err := s.store.Stat(ctx, key); err == nil {
		return
	} else if !errors.Is(err, blobstore.ErrNotFound) {
		s.log.Warn("audit build record", "key", key, "err", err)
		return
	}
	if _, err := s.store.Put(ctx, key, strings.NewReader(string(body)), int64(len(body)), blobstore.PutOptions{ContentType: "application/json"}); err != nil {
		s.log.Warn("audit build record", "key", key, "err", err)
	}
}

// podImagePullPolicy parses the serve flag.
func podImagePullPolicy(s string) (corev1.PullPolicy, error) {
	switch p := corev1.PullPolicy(s); p {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		return p, nil
	}
	return "", fmt.Errorf("image pull policy %q: want Always, IfNotPresent or Never", s)
}
