package sidecar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/porter-ci/porter/pkg/events/eventspb"
)

// ATCConfig says how the sidecar reaches the ATC.
type ATCConfig struct {
	// Address is host:port of the ATC's gRPC endpoint.
	Address string
	// CAPEM is the CA the ATC's certificate must chain to. It is required
	// unless Insecure is set.
	CAPEM []byte
	// Insecure dials without TLS; it comes from the action's explicit
	// marker (action.ATCLinkInsecure), never from a missing CA.
	Insecure bool
	// ServerName overrides the name checked in the ATC's certificate.
	ServerName string
	// Token is the step's token, minted by the ATC.
	Token string
}

// atcLink keeps one stream to the ATC open for the life of the step,
// reconnecting with backoff and resending whatever was not acknowledged.
type atcLink struct {
	cfg     ATCConfig
	stepID  string
	podName string
	outbox  *outbox
	log     *slog.Logger
	// commands receives everything the ATC sends except acknowledgements.
	commands chan<- *eventspb.ATCMessage
	// sessionOutput is sent as it comes, on whichever connection is live
	// (intercept output is interactive, not part of the durable record).
	sessionOutput <-chan *eventspb.SessionOutput
}

// errNoCA refuses a link that would carry the step's token in plain text.
var errNoCA = errors.New("no CA for the ATC (PORTER_ATC_CA_PEM): refusing to send the step's token without TLS " +
	"(only a server run with --insecure-grpc marks its actions as allowed to)")

// Check refuses a configuration that would send the token in plain text.
func (c ATCConfig) Check() error {
	if len(c.CAPEM) == 0 && !c.Insecure {
		return errNoCA
	}
	return nil
}

func dialATC(cfg ATCConfig) (*grpc.ClientConn, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if len(cfg.CAPEM) > 0 {
		// A CA given is used even where the link may be insecure.
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CAPEM) {
			return nil, errors.New("ATC CA: no certificate found in PEM")
		}
		creds = credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: cfg.ServerName, MinVersion: tls.VersionTLS12})
	}
	conn, err := grpc.NewClient(cfg.Address,
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 20 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 5 * time.Second, Backoff: fastBackoff()}),
	)
	if err != nil {
		return nil, fmt.Errorf("dial ATC at %s: %w", cfg.Address, err)
	}
	return conn, nil
}

// run keeps the stream up until ctx ends.
func (l *atcLink) run(ctx context.Context) {
	conn, err := dialATC(l.cfg)
	if err != nil {
		l.log.Error("cannot reach the ATC", "err", err)
		return
	}
	defer conn.Close()
	client := eventspb.NewStepStreamClient(conn)
	attempt := 0
	for ctx.Err() == nil {
		start := time.Now()
		err := l.serve(ctx, client)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > 10*time.Second {
			attempt = 0
		}
		delay := reconnectDelay(attempt, rand.Float64)
		attempt++
		level := slog.LevelWarn
		if status.Code(err) == codes.Unauthenticated {
			level = slog.LevelError
		}
		l.log.Log(ctx, level, "ATC stream ended; reconnecting", "err", err, "in", delay)
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return
		}
	}
}

// Reconnect backoff: doubling from reconnectBase to reconnectMax, each
// delay spread by ±reconnectJitter of itself, so that the sidecars of every
// step do not come back in the same instant after an ATC restart.
const (
	reconnectBase   = 100 * time.Millisecond
	reconnectMax    = 3 * time.Second
	reconnectJitter = 0.5
)

// reconnectDelay is the wait before reconnect attempt n (from 0); rnd
// returns a number in [0, 1).
func reconnectDelay(n int, rnd func() float64) time.Duration {
	return jitteredDelay(n, reconnectBase, reconnectMax, rnd)
}

// jitteredDelay doubles from base to most with attempt n (from 0), spread
// by ±reconnectJitter of itself: the sidecars of every step that failed
// together (an ATC restart, a blobstore outage) do not retry in lockstep.
func jitteredDelay(n int, base, most time.Duration, rnd func() float64) time.Duration {
	d := base
	for range n {
		if d >= most {
			break
		}
		d *= 2
	}
	d = min(d, most)
	return time.Duration(float64(d) * (1 + reconnectJitter*(2*rnd()-1)))
}

// serve runs one connection: hello, the ATC's resume point, then events and
// session output out and commands in.
func (l *atcLink) serve(ctx context.Context, client eventspb.StepStreamClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Connect(ctx, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	hello := &eventspb.Hello{StepId: l.stepID, Token: l.cfg.Token, FirstUnackedSeq: l.outbox.FirstUnacked(), PodName: l.podName, PorterVersion: Version}
	if err := stream.Send(&eventspb.SidecarMessage{Msg: &eventspb.SidecarMessage_Hello{Hello: hello}}); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	first, err := stream.Recv()
	if err != nil {
		return fmt.Errorf("wait for the ATC's resume point: %w", err)
	}
	if first.GetAck() == nil {
		return fmt.Errorf("ATC's first message is %T, want an ack", first.Msg)
	}
	cursor := first.GetAck().GetSeq()
	l.outbox.Ack(cursor)
	l.log.Info("connected to the ATC", "resume_after", cursor)

	// The receiver ends with the stream, which cancel ends; serve waits
	// for it.
	recvErr := make(chan error, 1)
	received := make(chan struct{})
	defer func() { cancel(); <-received }()
	go func() {
		defer close(received)
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if a := msg.GetAck(); a != nil {
				l.outbox.Ack(a.GetSeq())
				continue
			}
			select {
			case l.commands <- msg:
			case <-ctx.Done():
				recvErr <- ctx.Err()
				return
			}
		}
	}()

	for {
		evs, changed := l.outbox.After(cursor)
		for _, ev := range evs {
			if err := stream.Send(&eventspb.SidecarMessage{Msg: &eventspb.SidecarMessage_Event{Event: ev}}); err != nil {
				return fmt.Errorf("send event %d: %w", ev.Seq, err)
			}
			cursor = ev.Seq
		}
		select {
		case <-changed:
		case out := <-l.sessionOutput:
			if err := stream.Send(&eventspb.SidecarMessage{Msg: &eventspb.SidecarMessage_SessionOutput{SessionOutput: out}}); err != nil {
				return fmt.Errorf("send session output: %w", err)
			}
		case err := <-recvErr:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
