package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"

	"github.com/porter-ci/porter/pkg/sidecar/controlpb"
)

// controlServer is the sidecar's end of the local socket. Exactly one
// entrypoint attaches; everything it says arrives on fromEntrypoint.
type controlServer struct {
	controlpb.UnimplementedControlServer

	fromEntrypoint chan *controlpb.EntrypointMessage

	mu       sync.Mutex
	attached chan *controlpb.SidecarCommand // the attached entrypoint's outbox
	// gone is closed when the attached entrypoint disconnects.
	gone chan struct{}
	// ready is closed when an entrypoint first attaches.
	ready     chan struct{}
	readyOnce sync.Once
}

func newControlServer() *controlServer {
	return &controlServer{
		fromEntrypoint: make(chan *controlpb.EntrypointMessage, 64),
		ready:          make(chan struct{}),
		gone:           make(chan struct{}),
	}
}

// listen serves the control protocol on a unix socket at path, replacing a
// stale socket left by an earlier run. The directory is created so the
// entrypoint, which watches it, sees the socket appear.
func (c *controlServer) listen(ctx context.Context, path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create control socket directory: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale control socket: %w", err)
	}
	// Listen on a temporary name and rename into place, so the entrypoint
	// never sees a socket that is not yet accepting.
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("listen on control socket: %w", err)
	}
	// The main container may run as another user.
	if err := os.Chmod(tmp, 0o777); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod control socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("publish control socket: %w", err)
	}
	srv := grpc.NewServer()
	controlpb.RegisterControlServer(srv, c)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	return func() {
		srv.Stop()
		<-served
		_ = os.Remove(path)
	}, nil
}

// Attach serves the entrypoint's one stream.
func (c *controlServer) Attach(stream controlpb.Control_AttachServer) error {
	out := make(chan *controlpb.SidecarCommand, 64)
	gone := make(chan struct{})
	c.mu.Lock()
	if c.attached != nil {
		c.mu.Unlock()
		return errors.New("an entrypoint is already attached")
	}
	c.attached, c.gone = out, gone
	c.mu.Unlock()
	c.readyOnce.Do(func() { close(c.ready) })
	defer func() {
		c.mu.Lock()
		c.attached = nil
		c.mu.Unlock()
		close(gone)
	}()

	// The sender ends with the stream, or when Attach returns, which
	// waits for it.
	ctx, cancel := context.WithCancel(stream.Context())
	sent := make(chan struct{})
	defer func() { cancel(); <-sent }()
	errc := make(chan error, 1)
	go func() {
		defer close(sent)
		for {
			select {
			case cmd := <-out:
				if err := stream.Send(cmd); err != nil {
					errc <- err
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		msg, err := stream.Recv()
		if err != nil {
			return nil
		}
		select {
		case c.fromEntrypoint <- msg:
		case err := <-errc:
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

// send delivers a command to the attached entrypoint.
func (c *controlServer) send(ctx context.Context, cmd *controlpb.SidecarCommand) error {
	c.mu.Lock()
	out := c.attached
	c.mu.Unlock()
	if out == nil {
		return errors.New("the step's entrypoint is not attached")
	}
	select {
	case out <- cmd:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// detached returns a channel closed once the current entrypoint disconnects.
func (c *controlServer) detached() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gone
}
