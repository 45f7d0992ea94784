package atc

import (
	"context"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/porter-ci/porter/pkg/atc/retry"
	"github.com/porter-ci/porter/pkg/db"
)

// OpenDB opens the database, retrying for wait (--database-wait): in a
// cluster the ATC may start before PostgreSQL; on a host an unreachable
// database is an error at once (wait 0).
func OpenDB(ctx context.Context, dsn string, wait time.Duration, log *slog.Logger) (*db.DB, error) {
	var d *db.DB
	err := retry.Do(ctx, retry.Backoff(500*time.Millisecond, 5*time.Second), time.Now().Add(wait), log, "open the database",
		func() (bool, error) {
			var err error
			d, err = db.Open(ctx, dsn, log)
			return err == nil, err
		})
	return d, err
}

// InClusterConfig is what an ATC running in the cluster (deploy/atc, several
// replicas) sets beyond a host-run one: where its keys live and how replicas
// agree on who runs the single-runner loops. See docs/deploy.md.
type InClusterConfig struct {
	// DatabaseWait is how long serve retries the database at start.
	DatabaseWait time.Duration
	// CASecret and StepTokenKeySecret name Secrets (in SecretNamespace)
	// that hold the gRPC CA and the step token key, created on first use;
	// empty: files in StateDir. Replicas must share both: a step's sidecar
	// trusts the CA and presents a token any replica must verify.
	CASecret           string
	StepTokenKeySecret string
	// SecretNamespace is where those Secrets (and --signing-key-secret's)
	// are; empty: Namespace.
	SecretNamespace string
	// GRPCCertHosts are names or IPs the gRPC certificate covers besides
	// GRPCAdvertise's host (e.g. the Service's DNS name).
	GRPCCertHosts []string
	// GRPCCertLifetime is the gRPC certificate's validity; it is re-issued
	// after two thirds of it (0: DefaultGRPCCertLifetime).
	GRPCCertLifetime time.Duration
	// LeaderElectionNamespace turns on leader election: the single-runner
	// loops run only in the replica that holds Lease LeaderElectionName-<loop>
	// there. Empty: every server tries, and PostgreSQL advisory locks let one
	// at a time through (as they still do under a Lease).
	LeaderElectionNamespace string
	LeaderElectionName      string
	// LeaseDuration is how long a Lease holds without renewal (0: 15s).
	LeaseDuration time.Duration
}

// whileLeading runs fn as a single-runner loop named name until ctx ends.
// With leader election configured, fn runs only while this server holds
// Lease <LeaderElectionName>-<name>: fn's context ends when the Lease is lost,
// and the server campaigns again once fn has returned. Without it, fn just
// runs; its advisory lock is the guard either way, so a Lease changing hands
// while the old holder finishes a pass cannot run two passes at once.
func (s *Server) whileLeading(ctx context.Context, name string, fn func(context.Context)) {
	ns := s.cfg.LeaderElectionNamespace
	if ns == "" {
		fn(ctx)
		return
	}
	lease := s.cfg.LeaderElectionName + "-" + name
	log := s.log.With("lease", ns+"/"+lease, "identity", s.cfg.ServerID)
	leaseDuration := s.cfg.LeaseDuration
	if leaseDuration <= 0 {
		leaseDuration = 15 * time.Second
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: lease},
		Client:     s.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: s.cfg.ServerID},
	}
	for ctx.Err() == nil {
		// fn runs here rather than in the callback's goroutine, so that this
		// replica campaigns again only once fn has returned.
		leading := make(chan context.Context, 1)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:          lock,
			Name:          lease,
			LeaseDuration: leaseDuration,
			RenewDeadline: leaseDuration * 2 / 3,
			RetryPeriod:   leaseDuration / 7,
			// A replica that stops hands over at once instead of after the
			// lease runs out.
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) { leading <- lctx },
				OnStoppedLeading: func() {},
				OnNewLeader: func(id string) {
					if id != s.cfg.ServerID {
						log.Info("another replica leads "+name, "leader", id)
					}
				},
			},
		})
		if err != nil {
			log.Error("leader election", "err", err)
			return
		}
		runDone := make(chan struct{})
		go func() { defer close(runDone); le.Run(ctx) }()
		select {
		case lctx := <-leading:
			log.Info("leading: running " + name)
			fn(lctx)
			<-runDone
			log.Info("no longer leading " + name)
		case <-runDone:
		}
	}
}
