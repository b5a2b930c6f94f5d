package localapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// Defaults for Config fields left zero.
const (
	// DefaultListenAddr is where `syncd run` listens unless told otherwise.
	DefaultListenAddr = "127.0.0.1:7419"
	// DefaultMaxBodyBytes is the largest request body accepted: an entity's
	// data may be up to queue.DefaultMaxDataBytes (1 MiB), plus room for
	// the envelope ({"id":...,"data":...}) and whitespace.
	DefaultMaxBodyBytes = queue.DefaultMaxDataBytes + 64<<10
	// DefaultShutdownTimeout bounds how long Run waits for requests in
	// flight once its context ends.
	DefaultShutdownTimeout = 5 * time.Second
	// DefaultReadHeaderTimeout bounds how long a client may take to send
	// its request headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultBodyTimeout bounds how long a client may take to send a
	// request body after its headers: 1 MiB on loopback takes
	// milliseconds.
	DefaultBodyTimeout = 10 * time.Second
	// DefaultWriteTimeout bounds writing one answer.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultIdleTimeout is how long a kept-alive connection may wait
	// for its next request.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxUnauthenticatedConns bounds the connections that have
	// not yet sent a request with the token. An app's connection counts
	// only until its first request; each other one is closed within
	// DefaultReadHeaderTimeout or DefaultBodyTimeout.
	DefaultMaxUnauthenticatedConns = 64
)

// Daemon is what the API needs from the engine. *daemon.Daemon satisfies
// it.
type Daemon interface {
	// Account returns the current session's account; ok is false when
	// signed out.
	Account() (accountID string, ok bool)
	SetSession(ctx context.Context, accountID, token string) error
	Logout(ctx context.Context, policy daemon.LogoutPolicy, force bool) (purged int, err error)
	Status(ctx context.Context) (daemon.Status, error)
	// Notify wakes the workers after a write.
	Notify()
	// AccountWrite runs an app write with the current session's account
	// and keeps a logout from running until it returns (daemon.ErrNoSession
	// when signed out).
	AccountWrite(fn func(accountID string) error) error
	// Refresh reads an entity's record from the remote again and settles
	// the local entity with it.
	Refresh(ctx context.Context, entityType, id string) (e queue.Entity, removed bool, err error)
	// Versions reads the versions the remote keeps of an entity's
	// record, newest first.
	Versions(ctx context.Context, entityType, id string) ([]transport.Version, error)
}

// Store is what the API needs from the queue. *queue.Store satisfies it.
type Store interface {
	Apply(ctx context.Context, w queue.Write) (queue.Result, error)
	GetEntity(account, entityType, id string) (queue.Entity, error)
	ListEntities(account, entityType string, opts queue.ListOptions) ([]queue.Entity, string, error)
	GetOperation(id string) (queue.Operation, error)
	ListOperations(opts queue.ListOptions) ([]queue.Operation, string, error)
	Retry(ctx context.Context, id string) (queue.Operation, error)
	Discard(ctx context.Context, id string) error
	ResolveWith(ctx context.Context, account, entityType, id string, r queue.Resolution, app string) (queue.Entity, bool, error)
	ApplyBatch(ctx context.Context, ws []queue.Write, ordered bool) ([]queue.Result, error)
	// The app registry, and the counts an app token's status shows.
	AddApp(ctx context.Context, a queue.App) (queue.App, error)
	RemoveApp(ctx context.Context, name string) error
	Apps() ([]queue.App, error)
	TypeCounts(account string, types []string) (all, inAccount map[queue.State]int, err error)
}

// Config configures a Server. Daemon and Token are required; the zero
// value of every other field means its default.
type Config struct {
	// Daemon is the engine: session, status, wake-ups.
	Daemon Daemon
	// Store is the queue. Nil means the daemon's own (its Store method,
	// as *daemon.Daemon has).
	Store Store
	// Token is the admin token (see LoadOrCreateToken): it opens every
	// route. App tokens, made with it (POST /v1/apps), open the entity
	// routes of the types they are granted; the apps are kept in the
	// Store.
	Token string
	// AllowedOrigins lists the exact origins ("http://localhost:3000")
	// whose browser requests are served; they also get CORS headers. A
	// request without an Origin header (a non-browser client) is allowed;
	// any Origin not listed is refused with 403 forbidden_origin.
	AllowedOrigins []string
	// AllowedHosts lists Host names accepted besides the loopback names
	// (localhost, 127.0.0.0/8, ::1), typically those clients use to reach
	// a server forced onto a non-loopback address. Each one exempts that
	// name from the DNS-rebinding check: list only names you control.
	AllowedHosts []string
	// EntityTypes, if not empty, lists the entity types apps may use;
	// others get 404 unknown_entity_type. Empty: any valid type name.
	EntityTypes []string
	// MaxBodyBytes caps request bodies (413 body_too_large). Default
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Metrics serves GET /metrics (Prometheus text), behind the same
	// guard as every route. Nil means the daemon's own (its
	// MetricsHandler method, as *daemon.Daemon has), else no route.
	Metrics http.Handler
	// Logger. Default slog.Default().
	Logger *slog.Logger

	// UIOff turns the status page off (docs/ui.md): every /ui/ route
	// and POST /v1/ui/links answer 404 not_found.
	UIOff bool
	// Now is the clock of the status page's sign-in codes and sessions
	// (default time.Now).
	Now func() time.Time
	// History serves GET /v1/status/history (*daemon.History). Nil: the
	// route answers 404 not_found.
	History History

	// Bus is the event bus behind GET /v1/events (*daemon.Bus). Nil:
	// the route answers 404 not_found.
	Bus Bus
	// PingInterval is how often event subscribers are pinged (default
	// DefaultPingInterval); one silent for twice as long is dropped.
	PingInterval time.Duration
	// EventWriteTimeout bounds one write to an event subscriber (default
	// DefaultEventWriteTimeout).
	EventWriteTimeout time.Duration
	// EventSocketBuffer is the kernel send buffer of each subscriber's
	// connection in bytes (default DefaultEventSocketBuffer).
	EventSocketBuffer int
	// EventFlushInterval is the longest an event waits to be gathered
	// with those that follow it, the cap of each subscriber's share of
	// the write budget (default DefaultEventFlushInterval; negative:
	// write every run of events at once).
	EventFlushInterval time.Duration

	// ReadHeaderTimeout bounds how long a connection may take to send a
	// request's headers, from its first byte or from accept (default
	// DefaultReadHeaderTimeout).
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds how long a request may take to send its body,
	// from the end of its headers (default DefaultBodyTimeout). A body
	// still incomplete then ends the request (400 invalid_json if a
	// handler was reading it) and the connection.
	BodyTimeout time.Duration
	// WriteTimeout bounds how long writing one answer may take, from its
	// first byte (default DefaultWriteTimeout): a client that does not
	// read its answers does not hold a handler. Event streams set their
	// own (EventWriteTimeout).
	WriteTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request (default DefaultIdleTimeout).
	IdleTimeout time.Duration
	// MaxUnauthenticatedConns bounds the connections that have not yet
	// sent a request carrying the token (default
	// DefaultMaxUnauthenticatedConns), on each kind of listener apart
	// (TCP, the Unix socket); past it a new connection is closed at
	// once.
	MaxUnauthenticatedConns int
}

// Server is the loopback API of one daemon.
type Server struct {
	d        Daemon
	store    Store
	tokenSum [32]byte
	apps     appTable
	scopes   map[string]scope // route pattern → what it needs of the token
	origins  map[string]bool
	hosts    map[string]bool
	types    map[string]bool
	maxBody  int64
	logger   *slog.Logger
	handler  http.Handler
	metrics  http.Handler

	// altTokenPaths lists the paths (GET only) whose requests may carry
	// the token as ?token= or a WebSocket subprotocol instead of the
	// Authorization header, because browsers cannot set headers on a
	// WebSocket. The events endpoint registers itself here.
	altTokenPaths map[string]bool

	hijacked hijackedConns

	bus               Bus
	ws                wsSessions
	pingInterval      time.Duration
	eventWriteTimeout time.Duration
	eventSocketBuffer int
	evCache           eventCache
	flushInterval     time.Duration

	readHeaderTimeout time.Duration
	bodyTimeout       time.Duration
	writeTimeout      time.Duration
	idleTimeout       time.Duration
	gate              connGate
	storageFull       rateLog

	uiOff bool
	ui    *uiAuth
	uiMux *http.ServeMux

	history History

	runMu   sync.Mutex
	running bool
	tcpAddr *net.TCPAddr // Run's loopback TCP listener, for sign-in links

	// testHookConnState, if set by a test, runs after the server handled
	// a connection's state change (Run only).
	testHookConnState func(net.Conn, http.ConnState)
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Daemon == nil {
		return nil, errors.New("localapi: Config.Daemon is required")
	}
	if cfg.Token == "" {
		return nil, errors.New("localapi: Config.Token is required")
	}
	store := cfg.Store
	if store == nil {
		if ds, ok := cfg.Daemon.(interface{ Store() *queue.Store }); ok && ds.Store() != nil {
			store = ds.Store()
		}
	}
	if store == nil {
		return nil, errors.New("localapi: Config.Store is required when the daemon has no Store method")
	}
	s := &Server{
		d:             cfg.Daemon,
		store:         store,
		tokenSum:      tokenDigest(cfg.Token),
		origins:       make(map[string]bool),
		hosts:         make(map[string]bool),
		maxBody:       cmp.Or(cfg.MaxBodyBytes, DefaultMaxBodyBytes),
		logger:        cmp.Or(cfg.Logger, slog.Default()),
		altTokenPaths: make(map[string]bool),

		bus:               cfg.Bus,
		ws:                newWSSessions(),
		pingInterval:      cmp.Or(cfg.PingInterval, DefaultPingInterval),
		eventWriteTimeout: cmp.Or(cfg.EventWriteTimeout, DefaultEventWriteTimeout),
		eventSocketBuffer: cmp.Or(cfg.EventSocketBuffer, DefaultEventSocketBuffer),
		flushInterval:     cmp.Or(cfg.EventFlushInterval, DefaultEventFlushInterval),

		readHeaderTimeout: cmp.Or(cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		bodyTimeout:       cmp.Or(cfg.BodyTimeout, DefaultBodyTimeout),
		writeTimeout:      cmp.Or(cfg.WriteTimeout, DefaultWriteTimeout),
		idleTimeout:       cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout),
	}
	if s.pingInterval < 0 || s.eventWriteTimeout < 0 || s.eventSocketBuffer < 0 {
		return nil, errors.New("localapi: Config.PingInterval, EventWriteTimeout and EventSocketBuffer must not be negative")
	}
	if s.readHeaderTimeout < 0 || s.bodyTimeout < 0 || s.writeTimeout < 0 || s.idleTimeout < 0 || cfg.MaxUnauthenticatedConns < 0 {
		return nil, errors.New("localapi: Config.ReadHeaderTimeout, BodyTimeout, WriteTimeout, IdleTimeout and MaxUnauthenticatedConns must not be negative")
	}
	s.gate = connGate{max: cmp.Or(cfg.MaxUnauthenticatedConns, DefaultMaxUnauthenticatedConns), logger: s.logger}
	s.metrics = cfg.Metrics
	s.uiOff, s.history = cfg.UIOff, cfg.History
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	s.ui = newUIAuth(now)
	s.uiMux = s.uiRoutes()
	if s.metrics == nil {
		if dm, ok := cfg.Daemon.(interface{ MetricsHandler() http.Handler }); ok {
			s.metrics = dm.MetricsHandler()
		}
	}
	for _, o := range cfg.AllowedOrigins {
		s.origins[o] = true
	}
	for _, h := range cfg.AllowedHosts {
		s.hosts[normalizeHost(h)] = true
	}
	if len(cfg.EntityTypes) > 0 {
		s.types = make(map[string]bool)
		for _, t := range cfg.EntityTypes {
			if err := queue.ValidateEntityType(t); err != nil {
				return nil, fmt.Errorf("localapi: Config.EntityTypes: %w", err)
			}
			s.types[t] = true
		}
	}
	apps, err := store.Apps()
	if err != nil {
		return nil, fmt.Errorf("localapi: read the apps: %w", err)
	}
	if err := s.apps.load(apps); err != nil {
		return nil, err
	}
	s.handler = s.guard(s.routes())
	return s, nil
}

// route is one registered pattern, its handler and what it needs of the
// caller's token.
type route struct {
	pattern string // "METHOD /path" (Go 1.22 ServeMux pattern)
	h       http.Handler
	scope   scope
}

// routeTable lists every route of the API: the one place routes are
// declared, so that TestOpenAPIMatchesRoutes can hold openapi.json to it.
func (s *Server) routeTable() []route {
	rs := []route{
		{"PUT /v1/session", http.HandlerFunc(s.putSession), scopeAdmin},
		{"DELETE /v1/session", http.HandlerFunc(s.deleteSession), scopeAdmin},
		{"GET /v1/status", http.HandlerFunc(s.getStatus), scopeRead},
		// Counts every app's operations, as queue.totals does, which
		// app tokens do not get either.
		{"GET /v1/status/history", http.HandlerFunc(s.statusHistory), scopeAdmin},

		{"POST /v1/entities/{type}", http.HandlerFunc(s.createEntity), scopeWrite},
		{"GET /v1/entities/{type}", http.HandlerFunc(s.listEntities), scopeRead},
		{"GET /v1/entities/{type}/{id}", http.HandlerFunc(s.getEntity), scopeRead},
		{"PATCH /v1/entities/{type}/{id}", http.HandlerFunc(s.updateEntity), scopeWrite},
		{"DELETE /v1/entities/{type}/{id}", http.HandlerFunc(s.deleteEntity), scopeWrite},
		{"POST /v1/entities/{type}/{id}/resolve", http.HandlerFunc(s.resolveEntity), scopeWrite},
		{"POST /v1/entities/{type}/{id}/refresh", http.HandlerFunc(s.refreshEntity), scopeWrite},
		{"GET /v1/entities/{type}/{id}/versions", http.HandlerFunc(s.entityVersions), scopeRead},
		{"POST " + batchPath, http.HandlerFunc(s.batch), scopeWrite},

		{"GET /v1/operations", http.HandlerFunc(s.listOperations), scopeRead},
		{"GET /v1/operations/{id}", http.HandlerFunc(s.getOperation), scopeRead},
		{"POST /v1/operations/{id}/retry", http.HandlerFunc(s.retryOperation), scopeWrite},
		{"POST /v1/operations/{id}/discard", http.HandlerFunc(s.discardOperation), scopeWrite},

		{"GET " + eventsPath, http.HandlerFunc(s.events), scopeRead},
		{"GET " + openAPIPath, http.HandlerFunc(s.openAPI), scopeRead},

		{"POST /v1/apps", http.HandlerFunc(s.addApp), scopeAdmin},
		{"GET /v1/apps", http.HandlerFunc(s.listApps), scopeAdmin},
		{"DELETE /v1/apps/{name}", http.HandlerFunc(s.removeApp), scopeAdmin},
	}
	if s.metrics != nil {
		rs = append(rs, route{"GET /metrics", s.metrics, scopeAdmin})
	}
	if !s.uiOff {
		rs = append(rs, route{uiLinksPattern, http.HandlerFunc(s.uiLinks), scopeAdmin})
	}
	return rs
}

// routes is the API's mux. Method and path only; the guard in front of
// it does every security check.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	s.scopes = make(map[string]scope)
	for _, r := range s.routeTable() {
		mux.Handle(r.pattern, r.h)
		s.scopes[r.pattern] = r.scope
	}
	// Browsers cannot set headers on a WebSocket: the events stream may
	// carry the token as ?token= or a subprotocol.
	s.altTokenPaths[eventsPath] = true
	return mux
}

// Handler returns the API's handler: the guard and the routes.
func (s *Server) Handler() http.Handler { return s.handler }

// Run serves the API on every listener of lns (the loopback TCP one,
// the Unix socket of ListenUnix, or both) with one http.Server until ctx
// ends, then closes the listeners, waits up to DefaultShutdownTimeout for
// requests in flight, sends every event subscriber a 1001 going-away
// close frame, closes the hijacked connections (WebSockets) that remain,
// which http.Server.Shutdown does not wait for, and waits for their
// handlers. It returns nil after a shutdown caused by ctx. When serving
// one listener fails, Run shuts them all down the same way and returns
// that error.
func (s *Server) Run(ctx context.Context, lns ...net.Listener) error {
	if len(lns) == 0 {
		return errors.New("localapi: Run needs a listener")
	}
	s.runMu.Lock()
	if s.running {
		s.runMu.Unlock()
		return errors.New("localapi: Run called twice")
	}
	s.running = true
	for _, ln := range lns {
		if a, ok := ln.Addr().(*net.TCPAddr); ok && s.tcpAddr == nil {
			s.tcpAddr = a
		}
	}
	s.runMu.Unlock()

	hs := &http.Server{
		Handler: s.handler,
		// No ReadTimeout: the guard bounds each body instead
		// (BodyTimeout), which leaves event streams and slow handlers
		// alone.
		ReadHeaderTimeout: s.readHeaderTimeout,
		IdleTimeout:       s.idleTimeout,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			s.gate.state(c, st)
			if st == http.StateHijacked {
				s.hijacked.add(c)
			}
			if s.testHookConnState != nil {
				s.testHookConnState(c, st)
			}
		},
	}
	served := make(chan error, len(lns))
	for _, ln := range lns {
		go func() { served <- hs.Serve(ln) }()
	}

	running := len(lns)
	var serveErr error
	select {
	case serveErr = <-served:
		running-- // that Serve has closed its listener; stop the others
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx) // closes every listener
	s.closeStreams()
	if err != nil {
		s.logger.Warn("localapi: requests still running at shutdown; closing them", "err", err)
		hs.Close()
	}
	for range running {
		<-served // http.ErrServerClosed
	}
	if serveErr != nil {
		return fmt.Errorf("localapi: serve: %w", serveErr)
	}
	return nil
}

// closeStreams ends the event streams: a going-away close frame to each
// (they get closeGrace to answer it), then every hijacked connection
// still open is closed, and their handlers are waited for.
func (s *Server) closeStreams() {
	s.ws.shutdown(2 * closeGrace)
	s.hijacked.closeAll()
	s.ws.wait()
}

// hijackedConns tracks connections taken over from the HTTP server
// (WebSockets), so Run can close them at shutdown. A handler that hijacks
// a connection must call forget when it closes it.
type hijackedConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
}

func (h *hijackedConns) add(c net.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		c.Close()
		return
	}
	if h.conns == nil {
		h.conns = make(map[net.Conn]struct{})
	}
	h.conns[c] = struct{}{}
}

// forget drops a hijacked connection its handler has closed.
func (h *hijackedConns) forget(c net.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, c)
}

func (h *hijackedConns) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done = true
	for c := range h.conns {
		c.Close()
	}
	h.conns = nil
}
