package atc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	"github.com/porter-ci/porter/pkg/atc/exec"
	"github.com/porter-ci/porter/pkg/atc/retry"
	"github.com/porter-ci/porter/pkg/blobstore"
	"github.com/porter-ci/porter/pkg/creds"
	"github.com/porter-ci/porter/pkg/events/eventspb"
	"github.com/porter-ci/porter/pkg/hijack"
	"github.com/porter-ci/porter/pkg/netguard"
	"github.com/porter-ci/porter/pkg/stepserver"
)

// newExec prepares the runner of the builds' plans (pkg/atc/exec), the
// server being its engine.
func (s *Server) newExec() *exec.Runner {
	cfg := exec.Config{KeepAlive: s.cfg.KeepAlive, ExternalURL: s.cfg.ExternalURL, BaseResourceTypes: s.cfg.BaseResourceTypes,
		BaseResourceTypeDefaults: s.cfg.BaseResourceTypeDefaults, PodOTLPEndpoint: s.cfg.PodOTLPEndpoint,
		CheckPodLifetime: s.cfg.CheckPodLifetime, CheckPodMaxChecks: s.cfg.CheckPodMaxChecks, Lookahead: s.cfg.Lookahead,
		AheadPerWorker: s.cfg.Placement.MaxWaiting,
		VarSourceGuard: netguard.Guard{Allowed: s.cfg.VarSourceAllowedNetworks, Flag: "var-source-allowed-networks"}}
	if s.runtime != nil {
		cfg.ArtifactWorker = s.artifactWorker()
	}
	return exec.New(cfg, exec.Deps{Engine: execEngine{s}, Store: s.db, Blobs: s.store, Runtime: s.pods,
		Credentials: s.credentials(), Tracer: s.obs.tracer, Log: s.log, Sessions: checkSessions{s}, Delegates: logDelegates{}})
}

// checkSessions run checks in check pods, over the steps' streams (as
// intercept does, without its log line per session).
type checkSessions struct{ s *Server }

func (c checkSessions) Connected(stepID string) bool { return c.s.streams.Connected(stepID) }

func (c checkSessions) OpenSession(ctx context.Context, stepID string, open *eventspb.SessionOpen) (hijack.Session, error) {
	return c.s.streams.OpenSession(ctx, stepID, open)
}

// execEngine is the server as the steps' engine (exec.Engine).
type execEngine struct{ s *Server }

var _ exec.Engine = execEngine{}

func (e execEngine) ShutdownContext() context.Context { return e.s.shutdownCtx() }

func (e execEngine) RegisterStep(st *exec.StepState) {
	e.s.mu.Lock()
	e.s.steps[st.ID()] = st
	if _, ok := e.s.queued[st.ID()]; !ok {
		e.s.queued[st.ID()] = time.Now().UTC()
	}
	e.s.mu.Unlock()
}

func (e execEngine) Supervise(ctx context.Context, st *exec.StepState) *eventspb.StepFinished {
	return e.s.superviseTask(ctx, st)
}

func (e execEngine) Retire(stepID string) { e.s.retire(stepID) }

func (e execEngine) WakeScheduler() { e.s.wakeScheduler() }

func (e execEngine) PodAhead(outcome string) { e.s.obs.metrics.PodAhead(outcome) }

// Proceed is delivered when the sidecar connects, if it has not yet: not
// being connected is no error here.
func (e execEngine) Proceed(stepID string, p *eventspb.Proceed) error {
	if err := e.s.streams.Proceed(stepID, p); err != nil && !errors.Is(err, stepserver.ErrNotConnected) {
		return err
	}
	return nil
}

// credentials is the credential manager of a server: Vault when
// configured, else Kubernetes Secrets in the team's namespace.
func (s *Server) credentials() creds.Manager {
	if s.vault != nil {
		return s.vault
	}
	prefix := s.cfg.CredentialNamespacePrefix
	if prefix == "" {
		prefix = creds.DefaultNamespacePrefix
	}
	return &creds.Kubernetes{Client: s.kube, NamespacePrefix: prefix}
}

// retryDB runs a database write of a running build until it succeeds or
// there is no point (retry.DB).
func (s *Server) retryDB(ctx context.Context, what string, write func(context.Context) error) error {
	return retry.DB(ctx, s.shutdownCtx(), s.log, what, write)
}

// retire forgets a finished step in memory once its keep-alive and pod
// retention are over; its pod and container record are the garbage
// collector's (pkg/gc), which survives a restart where a timer would not.
func (s *Server) retire(stepID string) {
	keep := max(s.cfg.PodRetention, s.cfg.KeepAlive)
	time.AfterFunc(keep, func() {
		s.streams.Forget(stepID)
		s.forgetStep(stepID)
	})
}

// dedupOutputs gives a finished step's uploaded blobs their content
// address in the build's team (blobstore.Dedup): an output identical to one
// already stored resolves to that blob and the step's copy is deleted.
func (s *Server) dedupOutputs(ctx context.Context, st *exec.StepState, fin *eventspb.StepFinished) *eventspb.StepFinished {
	if len(fin.GetOutputs()) == 0 {
		return fin
	}
	team := st.Build().Team
	fin = proto.Clone(fin).(*eventspb.StepFinished)
	for _, o := range fin.Outputs {
		// A step names only what it wrote itself: a key elsewhere would have
		// the ATC hand another step's blob to this team.
		if !strings.HasPrefix(o.GetKey(), blobstore.BlobPrefix(team, st.ID())) {
			return exec.Errored(fmt.Sprintf("output %q: the step reported key %q, outside its own %q", o.GetName(), o.GetKey(), blobstore.BlobPrefix(team, st.ID())))
		}
		a := blobstore.DedupOrKeep(ctx, s.store, team, blobstore.Artifact{Key: o.GetKey(), Digest: o.GetDigest(), Size: o.GetSize()}, s.log)
		o.Key = a.Key
	}
	return fin
}

// ParseImagePullPolicy parses the serve flag.
func ParseImagePullPolicy(s string) (corev1.PullPolicy, error) {
	switch p := corev1.PullPolicy(s); p {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		return p, nil
	}
	return "", fmt.Errorf("image pull policy %q: want Always, IfNotPresent or Never", s)
}
