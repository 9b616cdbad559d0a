package main

import (
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// proxy forwards loopback TCP connections to a target, as the network
// between a server and its Redis does, and fails as a network can:
//
//   - stall: every link, old and new, stops forwarding and closes nothing;
//     what is sent meanwhile is held, and delivered on resume, even where
//     its sender has hung up since (a packet in flight does not know).
//   - cut: the target's side of every link is closed, and the client's left
//     open and silent, what it sends thrown away (a NAT or a load balancer
//     that forgot the flow).
//   - refuse: new connections are closed as soon as they are accepted.
type proxy struct {
	addr   string
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu      sync.Mutex
	flowing *sync.Cond // signalled when stalled or closed changes
	stalled bool
	refuse  bool
	closed  bool
	links   map[*link]struct{}
}

// link is one connection through the proxy.
type link struct {
	client, server net.Conn
	cut            bool // the server side was closed by cut; guarded by proxy.mu
}

func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{addr: ln.Addr().String(), target: target, ln: ln, links: make(map[*link]struct{})}
	p.flowing = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pump(l, c, s, true) })
		p.wg.Go(func() { p.pump(l, s, c, false) })
	}
}

// pump copies src to dst, holding each read while the proxy is stalled.
// At src's end it half-closes dst, unless the link was cut: a cut
// client's connection stays open and silent.
func (p *proxy) pump(l *link, src, dst net.Conn, up bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.stalled && !p.closed {
			p.flowing.Wait()
		}
		cut := l.cut
		p.mu.Unlock()
		if n > 0 && !(up && cut) {
			if _, werr := dst.Write(buf[:n]); werr != nil && !up {
				// The client has gone; what Redis still sends is read and dropped.
				dst = discard{}
			}
		}
		if err != nil {
			if !cut {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			return
		}
	}
}

// discard is a net.Conn that drops what it is given.
type discard struct{ net.Conn }

func (discard) Write(b []byte) (int, error) { return len(b), nil }

// stall stops every link, old and new, from forwarding, until resume.
func (p *proxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

// resume forwards again, what was held first.
func (p *proxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = false
	p.flowing.Broadcast()
}

// setRefuse sets whether new connections are closed as soon as accepted.
func (p *proxy) setRefuse(refuse bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = refuse
}

// cut closes the Redis side of every link, leaving the client side open.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.cut = true
		l.server.Close()
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.flowing.Broadcast()
	for l := range p.links {
		l.client.Close()
		l.server.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
