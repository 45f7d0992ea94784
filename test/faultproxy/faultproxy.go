// Package faultproxy is a TCP proxy for tests that can make its target
// unreachable for a while: live connections are cut and new ones are reset
// until the outage ends.
package faultproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections from Addr to a target.
type Proxy struct {
	Addr   string
	target string
	ln     net.Listener

	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	downUntil time.Time
	// Cuts counts connections cut or refused during outages.
	cuts int
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	go p.serve()
	return p, nil
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	return err
}

// Outage cuts every live connection and refuses new ones for d.
func (p *Proxy) Outage(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.downUntil = time.Now().Add(d)
	for c := range p.conns {
		c.Close()
		p.cuts++
	}
}

// Cuts is how many connections outages have cut or refused.
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

func (p *Proxy) down() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.downUntil) {
		p.cuts++
		return true
	}
	return false
}

func (p *Proxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if p.down() {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0) // a reset, like a host that is not there
			}
			c.Close()
			continue
		}
		go p.forward(c)
	}
}

func (p *Proxy) forward(client net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	var d net.Dialer
	server, err := d.DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		client.Close()
		return
	}
	p.track(client, true)
	p.track(server, true)
	defer func() {
		p.track(client, false)
		p.track(server, false)
		client.Close()
		server.Close()
	}()
	done := make(chan struct{}, 2)
	go func() { io.Copy(server, client); done <- struct{}{} }()
	go func() { io.Copy(client, server); done <- struct{}{} }()
	<-done
}
