package localapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/queue"
)

// Keepalive and limits of the event stream.
const (
	// DefaultPingInterval is how often the server pings a subscriber. A
	// subscriber that answers neither a ping nor anything else for
	// pongWaitFactor intervals is dropped.
	DefaultPingInterval = 30 * time.Second
	// DefaultEventWriteTimeout bounds one write to a subscriber's
	// socket. A subscriber whose socket stays full that long is dropped
	// without a close frame (it is not reading anyway).
	DefaultEventWriteTimeout = 10 * time.Second
	// DefaultEventSocketBuffer is the kernel send buffer of a
	// subscriber's connection. Fixing it (instead of letting the kernel
	// grow it to megabytes) makes the backlog a subscriber may leave
	// behind bounded and small: this buffer, plus the bus's per-subscriber
	// buffer of events; past both the subscriber is cut off.
	DefaultEventSocketBuffer = 64 << 10
	// DefaultEventFlushInterval is the longest an event waits to be
	// gathered with the ones that follow it. An event after a quiet spell
	// is written at once; one that comes within the hold of the last
	// write to its subscriber waits until the hold has passed and goes
	// out with what followed, in one system call. The hold is shared
	// out: it is 500 µs per subscriber (eventWriteBudget), so all
	// subscribers together cost at most 2,000 socket writes a second
	// under a stream of commits, however many there are: 0.5 ms with
	// one subscriber, 5 ms with 10, and this interval with 100 or more.
	// A fixed 50 ms for everyone held a change's event up to 50 ms from
	// a lone app (issue 28); 100 µs per subscriber (10 ms with 100) cost
	// the writers a third of their throughput with 100 subscribers, as
	// a fixed 1 ms did.
	DefaultEventFlushInterval = 50 * time.Millisecond
	// pongWaitFactor times the ping interval is how long a subscriber
	// may stay silent.
	pongWaitFactor = 2
	// closeGrace is how long the server waits for the subscriber to
	// answer its close frame before it closes the connection.
	closeGrace = time.Second
	// wsProtocol is the subprotocol the server speaks. A browser that
	// passes its token as a "syncd.token.<token>" subprotocol must also
	// offer this one, which the server selects (a browser fails a
	// handshake whose answer names none of the offered protocols).
	wsProtocol = "syncd.v1"
	// eventsPath is the one path whose GETs may carry the token as
	// ?token= or a subprotocol.
	eventsPath = "/v1/events"
	// maxEventTypes bounds the type filter's list.
	maxEventTypes = 32
	// eventWriteBudget is the socket writes a second that all event
	// subscribers together may cost under a stream of commits: each
	// subscriber's hold is its share of a second (see
	// DefaultEventFlushInterval).
	eventWriteBudget = 2_000
)

// Close codes sent to subscribers. Clients switch on the code; the
// reason text is for people.
const (
	// CloseSlowSubscriber (1008, policy violation): the subscriber fell
	// more than its buffer behind and events were dropped for it;
	// reconnect with since = the last seq read.
	CloseSlowSubscriber = websocket.ClosePolicyViolation
	// CloseGoingAway (1001): syncd is shutting down; reconnect with
	// since = the last seq read once it is back.
	CloseGoingAway = websocket.CloseGoingAway
	// CloseInternal (1011): reading the event log for the replay failed;
	// reconnect with since = the last seq read.
	CloseInternal = websocket.CloseInternalServerErr
	// CloseRevoked (4401): the stream's app token was revoked (its app
	// removed), or the status page's session ended (signed out,
	// expired). Do not reconnect with it: a new handshake gets 401.
	CloseRevoked = 4401
)

// Close reasons, the text of the close frames.
const (
	reasonSlow     = "slow_subscriber: fell too far behind, events dropped; reconnect with since=<last seq read>"
	reasonShutdown = "shutting_down: syncd is stopping; reconnect with since=<last seq read>"
	reasonInternal = "internal: reading the event log failed; see the daemon's log; reconnect with since=<last seq read>"
	reasonRevoked  = "token_revoked: this app's token was revoked; do not reconnect with it"
	// reasonSessionEnded closes a status page stream (code CloseRevoked)
	// whose session ended: signed out, or expired.
	reasonSessionEnded = "session_ended: the status page's session ended; sign in again with syncd ui"
)

// Bus is what the events endpoint needs from the event bus. *daemon.Bus
// satisfies it.
type Bus interface {
	Subscribe(since uint64, f daemon.Filter) (*daemon.Subscription, error)
	// LastSeq is the newest seq published: a subscription without
	// ?since= starts after it (live events only).
	LastSeq() uint64
}

// wsSessions tracks the event streams so that shutdown can close each
// with a going-away frame and wait for its handler, which
// http.Server.Shutdown does not do for hijacked connections.
type wsSessions struct {
	mu      sync.Mutex
	closing chan struct{} // closed when shutdown begins
	down    bool
	wg      sync.WaitGroup // one per stream whose handler has not returned
	live    atomic.Int64   // streams whose handler has not returned
}

func newWSSessions() wsSessions { return wsSessions{closing: make(chan struct{})} }

// add registers a stream; false once shutdown has begun.
func (w *wsSessions) add() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.down {
		return false
	}
	w.wg.Add(1)
	w.live.Add(1)
	return true
}

func (w *wsSessions) done() {
	w.live.Add(-1)
	w.wg.Done()
}

// eventHold is how long after a write to a subscriber the next event
// for it waits to be gathered with others, with streams subscribers
// open: their share of eventWriteBudget, up to max (the server's
// EventFlushInterval); zero when max is not positive (every run of
// events written at once).
func eventHold(streams int64, max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return min(time.Duration(streams)*(time.Second/eventWriteBudget), max)
}

// shutdown tells every stream to close with going-away (new ones are
// refused) and waits up to grace for them to finish. It reports whether
// they all did.
func (w *wsSessions) shutdown(grace time.Duration) bool {
	w.mu.Lock()
	if !w.down {
		w.down = true
		close(w.closing)
	}
	w.mu.Unlock()
	finished := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(finished)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-finished:
		return true
	case <-t.C:
		return false
	}
}

// wait waits for every stream's handler to return.
func (w *wsSessions) wait() { w.wg.Wait() }

// GET /v1/events?since=N&type=T,...&entityType=E&account=A (WebSocket).
//
// Without since the stream starts with the next event; with since=N it
// replays the retained events after N first (or sends one resync event
// when N is older than the history), then streams live.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "since", "type", "entityType", "account", "token")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f, err := eventFilter(q.Get("type"), q.Get("entityType"), q.Get("account"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// An app token sees the events of its entity types, and those of
	// none (session, connectivity), but not queue.totals: they count
	// every app's operations. Its stream ends when it is revoked.
	var (
		revoked <-chan struct{}
		admit   func(queue.Event) bool
	)
	if g := callerOf(r); g != nil {
		if f.EntityType != "" && !g.mayUse(f.EntityType) {
			s.fail(w, r, &apiError{http.StatusForbidden, CodeTypeNotGranted, fmt.Sprintf("app %q's token is not granted entity type %q", g.name, f.EntityType)})
			return
		}
		if current, _ := s.d.Account(); f.AccountID != "" && f.AccountID != current {
			s.fail(w, r, errAccountNotGranted(g))
			return
		}
		// Nor remote.misconfigured: what it saw names another app's
		// requests (type, server id).
		f.Granted, f.Withheld, revoked = g.types, []string{daemon.EventQueueTotals, daemon.EventRemoteMisconfigured}, g.revoked
		// The events of entities and operations are the signed-in
		// account's only, whichever it is when each is sent.
		admit = func(e queue.Event) bool {
			if e.EntityType == "" {
				return true
			}
			current, ok := s.d.Account()
			return ok && e.AccountID == current
		}
	}
	if !websocket.IsWebSocketUpgrade(r) {
		w.Header().Set("Upgrade", "websocket")
		s.fail(w, r, &apiError{http.StatusUpgradeRequired, CodeUpgradeRequired, "GET /v1/events is a WebSocket endpoint: send a WebSocket handshake (Connection: Upgrade, Upgrade: websocket)"})
		return
	}
	if offered := websocket.Subprotocols(r); len(offered) > 0 && !slices.Contains(offered, wsProtocol) {
		s.fail(w, r, badRequest(CodeInvalidRequest, "Sec-WebSocket-Protocol: offer "+wsProtocol+" (with "+wsTokenProtocolPrefix+"<token> to pass the token)"))
		return
	}
	if s.bus == nil {
		s.fail(w, r, &apiError{http.StatusNotFound, CodeNotFound, "this daemon has no event stream"})
		return
	}
	since := s.bus.LastSeq()
	if v := q.Get("since"); v != "" {
		if since, err = strconv.ParseUint(v, 10, 64); err != nil {
			s.fail(w, r, badRequest(CodeInvalidRequest, fmt.Sprintf("since must be an event seq (a non-negative integer), got %q", v)))
			return
		}
	}
	if !s.ws.add() {
		s.fail(w, r, &apiError{http.StatusServiceUnavailable, CodeShuttingDown, msgShuttingDown})
		return
	}
	defer s.ws.done()
	sub, err := s.bus.Subscribe(since, f)
	switch {
	case errors.Is(err, daemon.ErrTooManySubscribers):
		s.fail(w, r, &apiError{http.StatusServiceUnavailable, CodeTooManySubscribers, err.Error() + "; try again later"})
		return
	case err != nil:
		s.fail(w, r, err) // daemon.ErrBusClosed: shutting_down
		return
	}
	defer sub.Close()
	up := websocket.Upgrader{
		// The guard has checked Origin against the allowlist already.
		CheckOrigin:  func(*http.Request) bool { return true },
		Subprotocols: []string{wsProtocol},
		Error: func(w http.ResponseWriter, _ *http.Request, status int, reason error) {
			writeError(w, status, CodeInvalidRequest, reason.Error())
		},
	}
	hw := &hijackWriter{ResponseWriter: w, timeout: s.eventWriteTimeout}
	conn, err := up.Upgrade(hw, r, nil)
	if err != nil {
		if hw.conn != nil {
			s.hijacked.forget(hw.conn.Conn) // hijacked, then failed: Upgrade closed it
		}
		return // Upgrade has answered
	}
	// The hijacked connection was registered with s.hijacked (ConnState)
	// during Upgrade; it is closed here, so it is forgotten here too.
	defer s.hijacked.forget(hw.conn.Conn)
	defer conn.Close()
	// TCP or the Unix socket (*PeerConn): both bound the send buffer.
	if bc, ok := hw.conn.Conn.(interface{ SetWriteBuffer(int) error }); ok {
		_ = bc.SetWriteBuffer(s.eventSocketBuffer)
	}
	// A stream the status page opened ends with the page's session.
	reason := reasonRevoked
	end, stopWatch := s.uiStreamEnd(r)
	defer stopWatch()
	if end != nil {
		revoked, reason = end, reasonSessionEnded
	}
	s.stream(conn, hw.conn, sub, revoked, reason, admit)
}

// hijackWriter hands gorilla/websocket a corkConn around the hijacked
// connection.
type hijackWriter struct {
	http.ResponseWriter
	timeout time.Duration
	conn    *corkConn
}

func (h *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.conn = &corkConn{Conn: c, timeout: h.timeout}
	return h.conn, brw, nil
}

// corkConn lets the stream write a run of events with one system call:
// between cork and flush, writes (whole WebSocket frames) are collected;
// otherwise they go straight through. Control frames the reader
// goroutine answers (pong, close) while corked leave with the flush.
//
// Every system call write gets the same timeout: the deadlines
// gorilla/websocket sets per frame are ignored, because they would
// race with a flush in progress.
type corkConn struct {
	net.Conn
	timeout time.Duration
	mu      sync.Mutex
	corked  bool
	buf     []byte
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
	return c.Conn.Write(p)
}

// SetWriteDeadline ignores the caller's deadline; see corkConn.
func (c *corkConn) SetWriteDeadline(time.Time) error { return nil }

// SetDeadline sets the read deadline only; see corkConn.
func (c *corkConn) SetDeadline(t time.Time) error { return c.Conn.SetReadDeadline(t) }

func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// flush writes what was collected and uncorks.
func (c *corkConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	if len(c.buf) == 0 {
		return nil
	}
	c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
	_, err := c.Conn.Write(c.buf)
	if cap(c.buf) > maxBatchBytes*2 {
		c.buf = nil // don't keep a rare large batch's memory
	} else {
		c.buf = c.buf[:0]
	}
	return err
}

// buffered is how many bytes wait for the flush.
func (c *corkConn) buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.buf)
}

// maxBatchBytes ends a run of events written with one system call.
const maxBatchBytes = 32 << 10

// eventCache holds each recent event's encoded frame, so an event sent to
// many subscribers is marshalled and framed once.
type eventCache struct {
	mu   sync.Mutex
	ring [1024]struct {
		seq uint64
		pm  *websocket.PreparedMessage
	}
}

func (c *eventCache) message(e queue.Event) (*websocket.PreparedMessage, error) {
	cacheable := e.Type != daemon.EventResync // made per subscriber, not read from the log
	slot := &c.ring[e.Seq%uint64(len(c.ring))]
	if cacheable {
		c.mu.Lock()
		pm := slot.pm
		if slot.seq != e.Seq {
			pm = nil
		}
		c.mu.Unlock()
		if pm != nil {
			return pm, nil
		}
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	pm, err := websocket.NewPreparedMessage(websocket.TextMessage, b)
	if err != nil || !cacheable {
		return pm, err
	}
	c.mu.Lock()
	slot.seq, slot.pm = e.Seq, pm
	c.mu.Unlock()
	return pm, nil
}

// eventFilter parses the filter parameters.
func eventFilter(types, entityType, account string) (daemon.Filter, error) {
	var f daemon.Filter
	if types != "" {
		for t := range strings.SplitSeq(types, ",") {
			t = strings.TrimSpace(t)
			if t == "" || len(t) > 64 || strings.ContainsFunc(t, func(r rune) bool { return r <= ' ' || r > '~' }) {
				return f, badRequest(CodeInvalidRequest, fmt.Sprintf("type must be a comma-separated list of event types or prefixes ending in '.', got %q", types))
			}
			f.Types = append(f.Types, t)
		}
		if len(f.Types) > maxEventTypes {
			return f, badRequest(CodeInvalidRequest, fmt.Sprintf("type lists more than %d event types", maxEventTypes))
		}
	}
	if entityType != "" {
		if queue.ValidateEntityType(entityType) != nil {
			return f, badRequest(CodeInvalidRequest, fmt.Sprintf("entityType %q is not a valid entity type", entityType))
		}
		f.EntityType = entityType
	}
	if account != "" {
		if queue.ValidateAccountID(account) != nil {
			return f, badRequest(CodeInvalidRequest, "account: "+idProblem(queue.MaxAccountIDLen))
		}
		f.AccountID = account
	}
	return f, nil
}

// stream writes the subscription to conn until one side ends it, or
// revoked (nil for the admin token) is closed. admit, when not nil,
// decides at send time whether an event the filter passed is sent (an
// app token's: the signed-in account's only). This goroutine is the
// only writer of data frames; a reader goroutine answers pings, takes
// pongs and notices the subscriber's close.
func (s *Server) stream(conn *websocket.Conn, cc *corkConn, sub *daemon.Subscription, revoked <-chan struct{}, revokedReason string, admit func(queue.Event) bool) {
	pongWait := pongWaitFactor * s.pingInterval
	readerDone := make(chan struct{})
	conn.SetReadLimit(4 << 10) // subscribers send nothing but control frames
	conn.SetReadDeadline(time.Now().Add(pongWait))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(pongWait)) })
	go func() {
		defer close(readerDone)
		// A panic here would not reach the guard's recover (another
		// goroutine) and would end the process: log it and end the
		// stream instead.
		defer func() {
			if v := recover(); v != nil {
				s.logger.Error("localapi: event stream reader panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			}
		}()
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
			conn.SetReadDeadline(time.Now().Add(pongWait))
		}
	}()
	// The reader ends when the connection closes (the handler's defer);
	// wait for it so no goroutine outlives the stream.
	defer func() {
		conn.Close()
		<-readerDone
	}()

	// send writes one event while corked: it reaches the socket with the
	// next flush.
	send := func(e queue.Event) bool {
		if !sub.Accept(e) {
			return true // already sent (the replay and live events overlap)
		}
		if admit != nil && !admit(e) {
			return true
		}
		if e.Time.IsZero() {
			e.Time = time.Now().UTC() // resync events are made, not read from the log
		}
		pm, err := s.evCache.message(e)
		if err != nil {
			s.logger.Error("localapi: encoding an event", "seq", e.Seq, "err", err)
			return false
		}
		return conn.WritePreparedMessage(pm) == nil
	}
	flush := func() bool { return cc.flush() == nil }
	closeWith := func(code int, reason string) {
		if conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(closeGrace)) != nil {
			return
		}
		t := time.NewTimer(closeGrace) // for the subscriber's answering close frame
		defer t.Stop()
		select {
		case <-readerDone:
		case <-t.C:
		}
	}
	ended := func() bool {
		select {
		case <-revoked:
			closeWith(CloseRevoked, revokedReason)
			return true
		default:
		}
		switch err := sub.Err(); {
		case err == nil:
			return false
		case errors.Is(err, daemon.ErrSlowSubscriber):
			closeWith(CloseSlowSubscriber, reasonSlow)
		default: // the bus closed: syncd is stopping
			closeWith(CloseGoingAway, reasonShutdown)
		}
		return true
	}

	// The replay, a chunk of the durable log at a time.
	for {
		if ended() {
			return
		}
		chunk, err := sub.ReplayChunk()
		if err != nil {
			s.logger.Error("localapi: replaying events", "err", err)
			closeWith(CloseInternal, reasonInternal)
			return
		}
		if len(chunk) == 0 {
			break
		}
		for len(chunk) > 0 {
			cc.cork()
			for len(chunk) > 0 && cc.buffered() < maxBatchBytes {
				e := chunk[0]
				chunk = chunk[1:]
				if !send(e) {
					return
				}
			}
			if !flush() {
				return
			}
		}
	}
	ticker := time.NewTicker(s.pingInterval)
	defer ticker.Stop()
	batchTimer := time.NewTimer(time.Hour)
	batchTimer.Stop()
	defer batchTimer.Stop()
	var lastFlush time.Time
	// caughtUp: the last write left nothing waiting. Only then does an
	// event wait for the flush interval; a backlog is written at once.
	caughtUp := true
	for {
		// A subscriber cut off by the bus learns it at once, not after
		// the events still buffered for it.
		if ended() {
			return
		}
		select {
		case e, ok := <-sub.C():
			if !ok {
				ended()
				return
			}
			// Within the hold of the last write (after which nothing
			// was left waiting), let what the next commits publish
			// gather until it has passed, then write it all with one
			// system call.
			cc.cork()
			ok = send(e)
			// Meanwhile events wait in the bus's buffer for this
			// subscriber (DefaultSubscriberBuffer holds 1024, 50 ms at
			// 20,000 events a second); receiving each would wake this
			// goroutine once per event again.
			hold := eventHold(s.ws.live.Load(), s.flushInterval)
			if wait := hold - time.Since(lastFlush); ok && caughtUp && wait > 0 {
				batchTimer.Reset(wait)
				select {
				case <-batchTimer.C:
				case <-s.ws.closing:
				case <-readerDone:
				case <-revoked:
				}
				batchTimer.Stop()
			}
			caughtUp = false // unless the loop finds nothing left waiting
		batch:
			for ok && cc.buffered() < maxBatchBytes && sub.Err() == nil {
				select {
				case e, more := <-sub.C():
					if !more {
						break batch
					}
					ok = send(e)
				default:
					caughtUp = true
					break batch
				}
			}
			if !ok || !flush() {
				return
			}
			lastFlush = time.Now()
		case <-ticker.C:
			if conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(s.eventWriteTimeout)) != nil {
				return
			}
		case <-s.ws.closing:
			closeWith(CloseGoingAway, reasonShutdown)
			return
		case <-revoked:
			closeWith(CloseRevoked, revokedReason)
			return
		case <-readerDone:
			return // the subscriber closed, or went silent past pongWait
		}
	}
}
