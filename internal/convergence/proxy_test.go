package convergence

import (
	"net"
	"sync"
	"testing"
)

// cutProxy is a TCP proxy on loopback between one daemon and its server
// replica. Cut closes every connection through it and refuses new ones
// (accepted, then closed at once: the daemon sees a reset or EOF, as on
// a dropped network); Restore lets connections through again. Hold
// stops the bytes of one direction or both without closing anything (a
// stalled network: a request sent is not lost, it waits, and so does an
// answer), so a test can choose which of a daemon's requests and
// answers get through first. The upstream address can change (a
// restarted server replica listens on a new port) while the daemon keeps
// the proxy's.
type cutProxy struct {
	ln net.Listener

	mu       sync.Mutex
	upstream string
	cut      bool
	conns    map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
	// holdUp and holdDown are open while their direction (daemon to
	// server, server to daemon) is held; closed, and nil, when released.
	holdUp, holdDown chan struct{}
	heldDown         int // bytes from the server that waited for a hold
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
	go func() { p.copy(u, c, true); done <- struct{}{} }()
	go func() { p.copy(c, u, false); done <- struct{}{} }()
	<-done
	c.Close()
	u.Close()
	<-done
}

// copy copies src to dst until either fails, each chunk waiting while
// its direction is held.
func (p *cutProxy) copy(dst, src net.Conn, up bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hold := p.holdDown
			if up {
				hold = p.holdUp
			} else if hold != nil {
				p.heldDown += n
			}
			p.mu.Unlock()
			if hold != nil {
				<-hold
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// setHold holds (true) or releases (false) each direction: up, the
// daemon's requests; down, the server's answers.
func (p *cutProxy) setHold(up, down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if down && p.holdDown == nil {
		p.heldDown = 0
	}
	set := func(ch *chan struct{}, hold bool) {
		switch {
		case hold && *ch == nil:
			*ch = make(chan struct{})
		case !hold && *ch != nil:
			close(*ch)
			*ch = nil
		}
	}
	set(&p.holdUp, up)
	set(&p.holdDown, down)
}

// heldDownBytes is how many bytes from the server have waited for the
// current hold of the down direction.
func (p *cutProxy) heldDownBytes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.heldDown
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
	p.setHold(false, false)
	p.mu.Lock()
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
