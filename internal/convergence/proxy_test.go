package convergence

import (
	"io"
	"net"
	"sync"
	"testing"
)

// cutProxy is a TCP proxy on loopback between one daemon and its server
// replica. Cut closes every connection through it and refuses new ones
// (accepted, then closed at once: the daemon sees a reset or EOF, as on
// a dropped network); Restore lets connections through again. The
// upstream address can change (a restarted server replica listens on a
// new port) while the daemon keeps the proxy's.
type cutProxy struct {
	ln net.Listener

	mu       sync.Mutex
	upstream string
	cut      bool
	conns    map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

func newCutProxy(t *testing.T, upstream string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut || p.closed {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up := p.upstream
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.pipe(c, up)
	}
}

func (p *cutProxy) pipe(c net.Conn, upstream string) {
	defer p.wg.Done()
	defer p.forget(c)
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		u.Close()
		c.Close()
		return
	}
	p.conns[u] = struct{}{}
	p.mu.Unlock()
	defer p.forget(u)
	done := make(chan struct{}, 2)
	go func() { io.Copy(u, c); done <- struct{}{} }()
	go func() { io.Copy(c, u); done <- struct{}{} }()
	<-done
	c.Close()
	u.Close()
	<-done
}

func (p *cutProxy) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// setCut cuts (true) or restores (false) the link.
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}

// setUpstream points new connections at another address and closes the
// ones to the old (their server is gone anyway).
func (p *cutProxy) setUpstream(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upstream = addr
	for c := range p.conns {
		c.Close()
	}
}

func (p *cutProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
