package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/syncd/syncd/changefeed"
	"github.com/syncd/syncd/changefeed/pgfeed"
	"github.com/syncd/syncd/idempotency"
	"github.com/syncd/syncd/idempotency/boltstore"
	"github.com/syncd/syncd/idempotency/pgstore"
	bolt "go.etcd.io/bbolt"
)

// Defaults for the zero values of Config.
const (
	// DefaultFileName is the bbolt file New opens in Config.DataDir.
	DefaultFileName = "remote.db"
	// DefaultShutdownTimeout bounds how long Run waits for requests in
	// progress when its context ends.
	DefaultShutdownTimeout = 5 * time.Second
	// DefaultTombstoneRetention is how long deleted records are kept for
	// the changes feed.
	DefaultTombstoneRetention = 30 * 24 * time.Hour
	// DefaultHistoryVersions is how many versions of each record the
	// server keeps for GET /v1/{type}/{id}/versions.
	DefaultHistoryVersions = 20
	// DefaultHistoryAge is how long a superseded version is kept.
	DefaultHistoryAge = 30 * 24 * time.Hour
)

// Config configures a Server. Exactly one storage must be named: a bbolt
// file (Path, DataDir or BoltDB) or PostgreSQL (PostgresDSN or
// PostgresPool). Every other zero value means the default.
type Config struct {
	// Path is the bbolt file to open (created if missing).
	Path string
	// DataDir is a directory for the bbolt file DefaultFileName; used
	// when Path is empty.
	DataDir string
	// BoltDB is an open bbolt database to use instead; the caller keeps
	// owning it and closes it after Close.
	BoltDB *bolt.DB
	// PostgresDSN is a PostgreSQL connection string; the server opens
	// and closes its own pool (DefaultPostgresMaxConns() connections unless
	// the DSN sets pool_max_conns). Tables go into the search_path.
	PostgresDSN string
	// PostgresPool is an open pool to use instead; the caller keeps
	// owning it.
	PostgresPool *pgxpool.Pool
	// PostgresLockTimeout and PostgresLease tune the PostgreSQL
	// idempotency store (pgstore.DefaultLockTimeout, pgstore.DefaultLease).
	PostgresLockTimeout time.Duration
	PostgresLease       time.Duration

	// Tokens maps bearer tokens to actors.
	Tokens map[string]string
	// DevTokens accepts any bearer token; its actor is the part before
	// the first '.' ("alice.1" and "alice.2" are both alice). For
	// development and tests only. Tokens are checked first.
	DevTokens bool

	// Retention is how long idempotency records are kept
	// (idempotency.DefaultRetention).
	Retention time.Duration
	// TombstoneRetention is how long deleted records are kept for the
	// changes feed (DefaultTombstoneRetention). A device whose cursor
	// is older than that reads everything again (410 cursor_expired).
	TombstoneRetention time.Duration
	// RejectConflicts lists the entity types whose conflict policy is
	// reject: an update or delete made on a version older than the
	// record's answers 409 version_conflict with the current record.
	// "*" names every type. The others follow Conflicts.
	RejectConflicts []string
	// Conflicts maps entity types to their conflict policy; "*" names
	// every type not listed. The default is PolicyMerge. The types of
	// RejectConflicts are PolicyReject.
	Conflicts map[string]Policy
	// HistoryVersions and HistoryAge bound each record's version
	// history (GET /v1/{type}/{id}/versions): its latest
	// HistoryVersions versions (DefaultHistoryVersions), of which those
	// older than HistoryAge (DefaultHistoryAge) are swept, the current
	// one never. A negative HistoryVersions keeps none.
	HistoryVersions int
	HistoryAge      time.Duration
	// SweepInterval is how often expired records are deleted
	// (idempotency.DefaultSweepInterval).
	SweepInterval time.Duration
	// InFlightWait is how long a duplicate waits for the request in
	// flight with its key in this process before 409. Zero, the
	// default, answers 409 with Retry-After at once (the IETF draft's
	// rule); a duplicate on another replica always does.
	InFlightWait time.Duration
	// MaxBodyBytes limits request bodies (idempotency.DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// LoopbackHostsOnly refuses requests whose Host is not a loopback
	// name (localhost, 127.0.0.0/8, ::1) with 403 forbidden_host. Set it
	// for a server listening on loopback, so a web page whose DNS name was
	// rebound to 127.0.0.1 cannot reach it (syncd's embedded server and
	// `syncd server` on a loopback address do).
	LoopbackHostsOnly bool
	// Now is the clock for entity times and record expiry (time.Now).
	Now func() time.Time
	// Logger gets the server's log lines (default: discard).
	Logger *slog.Logger
	// TestHookAfterReserve runs after a new idempotency reservation,
	// before the handler (idempotency.Config.TestHookAfterReserve).
	TestHookAfterReserve func(ctx context.Context)
	// TestHookChangesRead runs inside each read of the changes feed on
	// PostgreSQL, after the actor's head and horizon are read and before
	// its rows are: a test places a tombstone sweep there.
	TestHookChangesRead func(ctx context.Context)
}

// Server is the reference remote server. Its methods are safe for
// concurrent use.
type Server struct {
	cfg      Config
	log      *slog.Logger
	store    entityStore
	idem     idempotency.Store
	gate     *idempotency.Gate
	sweeper  *idempotency.Sweeper
	auth     *authenticator
	registry *prometheus.Registry
	replays  *prometheus.CounterVec
	conflict prometheus.Counter
	handler  http.Handler

	policies map[string]Policy    // conflict policy by type, "*" the default
	notifier *changefeed.Notifier // wakes long polls of the changes feed
	listener *pgfeed.Listener     // PostgreSQL: NOTIFY from every replica
	tombStop context.CancelFunc   // ends the tombstone sweep loop
	tombDone chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// New opens (and migrates) the storage, starts the expiry sweeper and
// returns the server. Close releases what New opened.
func New(cfg Config) (*Server, error) {
	if len(cfg.Tokens) == 0 && !cfg.DevTokens {
		return nil, ErrNoAuth
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TombstoneRetention <= 0 {
		cfg.TombstoneRetention = DefaultTombstoneRetention
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = idempotency.DefaultSweepInterval
	}
	if cfg.HistoryVersions == 0 {
		cfg.HistoryVersions = DefaultHistoryVersions
	}
	if cfg.HistoryAge <= 0 {
		cfg.HistoryAge = DefaultHistoryAge
	}
	pols, err := policies(cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, auth: newAuthenticator(cfg.Tokens, cfg.DevTokens),
		policies: pols, notifier: &changefeed.Notifier{}}
	if err := s.openStorage(context.Background()); err != nil {
		return nil, err
	}

	s.registry = prometheus.NewRegistry()
	s.replays = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idempotency_replays_total",
		Help: "Requests answered with a stored response, by operation.",
	}, []string{"operation"})
	s.conflict = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idempotency_conflicts_total",
		Help: "Requests refused because their Idempotency-Key was used with another request (422).",
	})
	s.registry.MustRegister(s.replays, s.conflict)

	gate, err := idempotency.New(idempotency.Config{
		Store: s.idem,
		Actor: func(r *http.Request) (string, error) {
			if a, ok := ActorFromContext(r.Context()); ok {
				return a, nil
			}
			return "", errors.New("no actor")
		},
		Operation:            operation,
		Retention:            cfg.Retention,
		InFlightWait:         cfg.InFlightWait,
		MaxBodyBytes:         cfg.MaxBodyBytes,
		Now:                  cfg.Now,
		Logger:               cfg.Logger,
		OnOutcome:            s.observe,
		WriteError:           writeError,
		TestHookAfterReserve: cfg.TestHookAfterReserve,
	})
	if err != nil {
		s.store.close()
		return nil, err
	}
	s.gate = gate
	s.sweeper, err = idempotency.NewSweeper(idempotency.SweeperConfig{
		Store: s.idem, Interval: cfg.SweepInterval, Now: cfg.Now, Logger: cfg.Logger,
	})
	if err != nil {
		s.store.close()
		return nil, err
	}
	s.handler = s.routes(gate.Wrap)
	if cfg.LoopbackHostsOnly {
		s.handler = loopbackHostsOnly(s.handler)
	}
	if pg, ok := s.store.(*pgEntities); ok {
		s.listener = pgfeed.NewListener(pg.pool, s.notifier, cfg.Logger)
		if err := s.listener.Start(context.Background()); err != nil {
			s.listener.Stop()
			s.store.close()
			return nil, fmt.Errorf("remote: LISTEN for the changes feed: %w", err)
		}
	}
	if err := s.sweeper.Start(context.Background()); err != nil {
		if s.listener != nil {
			s.listener.Stop()
		}
		s.store.close()
		return nil, err
	}
	s.startTombstoneSweep()
	return s, nil
}

// startTombstoneSweep starts the loop that deletes tombstones older than
// TombstoneRetention, every SweepInterval.
func (s *Server) startTombstoneSweep() {
	ctx, cancel := context.WithCancel(context.Background())
	s.tombStop, s.tombDone = cancel, make(chan struct{})
	go func() {
		defer close(s.tombDone)
		t := time.NewTicker(s.cfg.SweepInterval)
		defer t.Stop()
		for {
			if n, err := s.SweepTombstones(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("remote: tombstone sweep failed", "err", err)
			} else if n > 0 {
				s.log.Debug("remote: swept tombstones", "count", n)
			}
			if n, err := s.SweepHistory(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("remote: version history sweep failed", "err", err)
			} else if n > 0 {
				s.log.Debug("remote: swept old versions", "count", n)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// SweepTombstones deletes the deleted records older than
// TombstoneRetention (the sweep loop does this every SweepInterval).
// Cursors from before them then answer 410 cursor_expired.
func (s *Server) SweepTombstones(ctx context.Context) (int, error) {
	return s.store.sweepTombstones(ctx, s.cfg.Now().Add(-s.cfg.TombstoneRetention))
}

// SweepHistory deletes the kept versions older than HistoryAge, but each
// record's current one (the sweep loop does this every SweepInterval).
func (s *Server) SweepHistory(ctx context.Context) (int, error) {
	return s.store.sweepHistory(ctx, s.cfg.Now().Add(-s.cfg.HistoryAge))
}

func (s *Server) openStorage(ctx context.Context) error {
	cfg := s.cfg
	bolted := cfg.Path != "" || cfg.DataDir != "" || cfg.BoltDB != nil
	pg := cfg.PostgresDSN != "" || cfg.PostgresPool != nil
	switch {
	case bolted && pg:
		return ErrTwoStorages
	case bolted:
		db, own := cfg.BoltDB, false
		if db == nil {
			path := cfg.Path
			if path == "" {
				path = filepath.Join(cfg.DataDir, DefaultFileName)
			}
			var err error
			if db, err = openBolt(path); err != nil {
				return err
			}
			own = true
		}
		idem, err := boltstore.New(db)
		if err == nil {
			var es *boltEntities
			if es, err = newBoltEntities(db, own, s.notifier, s.cfg.HistoryVersions); err == nil {
				s.store, s.idem = es, idem
				return nil
			}
		}
		if own {
			db.Close()
		}
		return err
	case pg:
		pool, own := cfg.PostgresPool, false
		if pool == nil {
			var err error
			if pool, err = openPool(ctx, cfg.PostgresDSN); err != nil {
				return err
			}
			own = true
		}
		idem, err := pgstore.New(ctx, pgstore.Config{Pool: pool, LockTimeout: cfg.PostgresLockTimeout, Lease: cfg.PostgresLease})
		if err == nil {
			var es *pgEntities
			if es, err = newPGEntities(ctx, pool, own, s.cfg.HistoryVersions); err == nil {
				es.testHookChangesRead = cfg.TestHookChangesRead
				s.store, s.idem = es, idem
				return nil
			}
		}
		if own {
			pool.Close()
		}
		return err
	}
	return ErrNoStorage
}

// operation names the operation type of a gated request, for records and
// the operation label of idempotency_replays_total.
func operation(r *http.Request) string {
	switch r.Method {
	case http.MethodPost:
		return "create"
	case http.MethodPatch:
		return "update"
	case http.MethodDelete:
		return "delete"
	}
	return r.Method
}

func (s *Server) observe(_ *http.Request, op string, o idempotency.Outcome) {
	switch o {
	case idempotency.OutcomeReplayed:
		s.replays.WithLabelValues(op).Inc()
	case idempotency.OutcomeKeyReused:
		s.conflict.Inc()
	}
}

// routes builds the handler; wrap puts each write route behind the gate.
func (s *Server) routes(wrap func(http.Handler) http.Handler) http.Handler {
	return s.routesWith(wrap, false)
}

// routesWith is routes; itemByItem serves each operation of a batch in a
// transaction of its own, as the batch handler did before its items
// committed together (for BenchmarkBatchCreates).
func (s *Server) routesWith(wrap func(http.Handler) http.Handler, itemByItem bool) http.Handler {
	api := http.NewServeMux()
	api.Handle("POST /v1/{type}", wrap(http.HandlerFunc(s.handleCreate)))
	api.Handle("PATCH /v1/{type}/{id}", wrap(http.HandlerFunc(s.handleUpdate)))
	api.Handle("DELETE /v1/{type}/{id}", wrap(http.HandlerFunc(s.handleDelete)))
	api.HandleFunc("GET /v1/{type}/{id}", s.handleGet)
	api.HandleFunc("GET /v1/{type}/{id}/versions", s.handleVersions)
	api.HandleFunc("GET /v1/{type}", s.handleList)
	api.Handle("GET /v1/changes", changefeed.Handler(changefeed.Config{
		Source:   s.store,
		Notifier: s.notifier,
		Actor: func(r *http.Request) (string, error) {
			if a, ok := ActorFromContext(r.Context()); ok {
				return a, nil
			}
			return "", errors.New("no actor")
		},
		WriteError: writeError,
	}))
	// Each operation of a batch goes through this same mux, so through
	// the gate on its own; with the store, the operations commit
	// together. (The literal routes make "batch", "changes" and
	// "capabilities" names no entity type can take here.)
	batch := idempotency.BatchConfig{Handler: api, WriteError: writeError, Store: s.idem, Chain: idempotency.ChainVersions}
	if itemByItem {
		batch.Store = nil
	}
	api.Handle("POST /v1/batch", idempotency.BatchHandler(batch))
	api.HandleFunc("GET /v1/capabilities", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"changes": true, "batch": batch.Capabilities(),
			"conflicts": s.policyList(), "versions": true})
	})

	root := http.NewServeMux()
	root.Handle("/v1/", s.auth.wrap(api))
	root.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	root.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	root.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, http.StatusNotFound, CodeNotFound, "no such route")
	})
	return root
}

// Handler returns the server's HTTP handler: the entity routes under
// /v1/ (bearer token required; writes behind the idempotency gate),
// GET /metrics and GET /healthz.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry returns the server's own Prometheus registry (served at
// /metrics).
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// Run serves on ln until ctx ends, then shuts down (waiting up to
// DefaultShutdownTimeout for requests in progress) and closes ln. It
// does not Close the server.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	// Long polls of the changes feed answer at once when the shutdown
	// begins, instead of holding it up to their wait.
	srv.RegisterOnShutdown(s.notifier.Close)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("remote: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), DefaultShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// A request still running, or a connection the client opened and
		// never used (net/http counts those as busy for 5 s): close them.
		// What a cut request did not commit is rolled back.
		s.log.Warn("remote: requests or new connections still open at shutdown; closing them", "err", err)
		srv.Close()
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("remote: serve: %w", serr)
	}
	return nil
}

// Close stops the sweeper and closes the storage New opened (not a
// BoltDB or PostgresPool passed in Config). Safe to call twice.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.notifier.Close() // long polls answer now
		s.sweeper.Stop(context.Background())
		if s.tombStop != nil {
			s.tombStop()
			<-s.tombDone
		}
		if s.listener != nil {
			s.listener.Stop()
		}
		s.closeErr = s.store.close()
	})
	return s.closeErr
}

// Sweep deletes the idempotency records expired at now (the sweeper does
// this every SweepInterval).
func (s *Server) Sweep(ctx context.Context) (int, error) {
	return s.sweeper.RunOnce(ctx)
}

// Entities returns the actor's entities of type typ with clientID, or
// with clientID "" up to 1000 of them. For tests and tools.
func (s *Server) Entities(ctx context.Context, actor, typ, clientID string) ([]Entity, error) {
	return s.store.list(ctx, actor, typ, clientID, listLimit)
}

// Count returns how many records the actor has of type typ with clientID
// (tombstones included): a correct server answers 0 or 1.
func (s *Server) Count(ctx context.Context, actor, typ, clientID string) (int, error) {
	es, err := s.store.list(ctx, actor, typ, clientID, listLimit)
	return len(es), err
}
