package localapi

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits on connections and requests that an app without the token
// could otherwise use to hold the daemon's connections and goroutines:
// see Config.ReadHeaderTimeout, BodyTimeout, WriteTimeout, IdleTimeout
// and MaxUnauthenticatedConns, and docs/localapi.md ("Limits").

// connKey is the request context key of the request's connection (set
// by Run's http.Server.ConnContext).
type connKey struct{}

// connGate bounds the connections that have not authenticated: accepted
// and not yet past the token check of one of their requests. Each such
// connection is closed by the server's timeouts within seconds; the gate
// bounds how many can be open meanwhile.
type connGate struct {
	max    int
	logger *slog.Logger

	mu      sync.Mutex
	unauth  map[net.Conn]struct{}
	count   [2]int    // len(unauth) per listener kind (gateKind): each has its own max
	refused int       // connections closed at the limit since the last log line
	logged  time.Time // last log line about refused connections
}

// gateKind is a connection's listener: 0 loopback TCP, 1 the Unix
// socket. Each has its own bound, so that other users' connections to
// TCP, which anyone on the machine may open, never lock this user's
// apps out of the socket.
func gateKind(c net.Conn) int {
	if _, ok := c.(*PeerConn); ok {
		return 1
	}
	return 0
}

// dropLocked forgets an unauthenticated connection.
func (g *connGate) dropLocked(c net.Conn) {
	if _, ok := g.unauth[c]; ok {
		delete(g.unauth, c)
		g.count[gateKind(c)]--
	}
}

// gateLogEvery bounds how often refused connections are logged.
const gateLogEvery = time.Minute

// state follows a connection's state (http.Server.ConnState). A new
// connection past the limit is closed at once.
func (g *connGate) state(c net.Conn, st http.ConnState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch st {
	case http.StateNew:
		if g.count[gateKind(c)] >= g.max {
			c.Close()
			g.refused++
			if now := time.Now(); now.Sub(g.logged) >= gateLogEvery {
				g.logger.Warn("localapi: too many connections without the API token; closing new ones", "limit", g.max, "closed", g.refused, "remote", remoteOf(c))
				g.logged, g.refused = now, 0
			}
			return
		}
		if g.unauth == nil {
			g.unauth = make(map[net.Conn]struct{})
		}
		g.unauth[c] = struct{}{}
		g.count[gateKind(c)]++
	case http.StateHijacked, http.StateClosed:
		g.dropLocked(c)
	}
}

// authenticated records that a request on the connection of r carried
// the token: the connection no longer counts.
func (g *connGate) authenticated(r *http.Request) {
	c, ok := r.Context().Value(connKey{}).(net.Conn)
	if !ok {
		return // not served by Run (a test's own server)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dropLocked(c)
}

// refuseUnauth marks the answer to r, refused before its token was
// checked (a foreign Host or Origin, a CORS preflight, a missing or wrong
// token), as the connection's last when the connection has not
// authenticated: net/http closes it after the answer. Otherwise a client
// without the token could keep a slot of the MaxUnauthenticatedConns
// bound for good by repeating a bodiless refused request before each
// idle timeout ended.
func (g *connGate) refuseUnauth(w http.ResponseWriter, r *http.Request) {
	c, ok := r.Context().Value(connKey{}).(net.Conn)
	if !ok {
		return
	}
	g.mu.Lock()
	_, unauth := g.unauth[c]
	g.mu.Unlock()
	if unauth {
		w.Header().Set("Connection", "close")
	}
}

// limitBody bounds how long the body of r may take to arrive: the
// connection's read deadline is set to timeout from now. net/http clears
// it once the body has been read to its end (it starts its background
// read of the connection then), so a handler slower than the timeout is
// not cut off. A request refused before its body is read keeps the
// deadline, and net/http's read of the rest of the body after the
// answer ends the connection when it passes. Requests without a body (a
// WebSocket handshake too) are left alone.
func limitBody(w http.ResponseWriter, r *http.Request, timeout time.Duration) {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout)) // unsupported by httptest.ResponseRecorder
}

// remoteOf names a connection's peer for the log: its address on TCP,
// its uid and pid on the Unix socket (whose address is empty).
func remoteOf(c net.Conn) string {
	if p, ok := c.(*PeerConn); ok {
		return fmt.Sprintf("unix uid=%d pid=%d", p.UID, p.PID)
	}
	return c.RemoteAddr().String()
}
