// Package daemon is syncd's engine: the worker pool that drains the queue
// through package transport (claim a ready partition head, send, record
// the decision and reconcile), backoff with jitter, the session and
// account guard, metrics, and the start and stop lifecycle. It does not
// parse HTTP requests from apps: package localapi does, and calls it.
// docs/engine.md describes the engine's behaviour.
package daemon

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// Defaults for Config fields left zero.
const (
	// DefaultConcurrency bounds how many operations are sent at once.
	DefaultConcurrency = 4
	// DefaultLease is how long a claimed operation belongs to its worker:
	// three times transport.DefaultTimeout. A send is cut off at two
	// thirds of it, which leaves the rest for recording the outcome; a
	// worker that still overruns loses the lease, and a second send of
	// the same key is replayed by the server.
	DefaultLease = 3 * transport.DefaultTimeout
	// DefaultSweepInterval is how often the retention sweep runs.
	DefaultSweepInterval = 10 * time.Minute
	// DefaultMaxOperationAge is the age past which an operation that may
	// have been applied (an attempt went out without a definite answer:
	// queue.Operation.MaybeApplied) is not sent again but fails with
	// CodeOperationExpired: a day short of the reference server's 7-day
	// idempotency retention. A resend after the server forgot the key
	// could apply the operation a second time. The age counts from the
	// latest of creation and the user's retry or renewal. An operation
	// that cannot have been applied is sent whatever its age.
	DefaultMaxOperationAge = 6 * 24 * time.Hour
)

// Sender sends one attempt of an operation. *transport.Client is one.
type Sender interface {
	Send(ctx context.Context, r transport.Request) transport.Outcome
}

// Config configures a Daemon. The zero value of every field but Store
// means its default.
type Config struct {
	// Store is the opened queue. The daemon does not close it.
	Store *queue.Store
	// Now is the clock. Default time.Now. Retries, leases and operation
	// age are computed from it; the queue should use the same clock.
	Now func() time.Time
	// Logger. Default slog.Default().
	Logger *slog.Logger

	// Transport sends operations to the remote server. Start fails
	// without one; the session guard and status work without it.
	Transport Sender
	// Policy schedules retries (zero: transport's defaults, but a zero
	// MaxElapsed is MaxOperationAge). MaxElapsed gives up only on
	// operations that may have been applied; the others are retried at
	// the capped backoff however long it takes.
	Policy transport.Policy
	// Concurrency bounds the operations being sent at once (default
	// DefaultConcurrency).
	Concurrency int
	// Lease is how long a claimed operation stays the worker's (default
	// DefaultLease). It must outlive the transport's request timeout; a
	// send is also cut off at two thirds of it.
	Lease time.Duration
	// MaxOperationAge: an operation that may have been applied and is
	// older than this, counted from the latest of its creation and the
	// user's retry or renewal, fails with CodeOperationExpired instead
	// of being resent (default DefaultMaxOperationAge), and retrying it
	// gives up after it (unless Policy.MaxElapsed says otherwise). Keep
	// it below the server's idempotency retention.
	MaxOperationAge time.Duration
	// Rand returns a uniform value in [0, n), for backoff jitter (default
	// math/rand/v2's Int64N). Tests pass a seeded generator.
	Rand func(n int64) int64
	// Registry receives the daemon's metrics (default a new registry,
	// never the global one). MetricsHandler serves it.
	Registry *prometheus.Registry
	// SweepInterval is how often the retention sweep runs while the
	// daemon is started (default DefaultSweepInterval): done operations
	// past the queue's retention and change-log events past its history
	// are deleted.
	SweepInterval time.Duration
	// ProbeInterval paces the probes of a remote that stopped
	// answering, when operations wait (default DefaultProbeInterval):
	// the first goes after the shorter of a second and the interval, and
	// the wait doubles after every probe, up to 12 intervals. While the
	// remote does not answer, the workers hold the queue for the prober.
	// Negative: never probe (and no hold). Probing needs a Transport that
	// is a Prober.
	ProbeInterval time.Duration
	// Owner names this daemon in operation leases (default host, pid and
	// a random suffix).
	Owner string

	// Pull says whether the server's changes are pulled (default
	// PullAuto: unless the remote's GET /v1/capabilities says it has no
	// feed). Pulling needs a Transport that is a Puller.
	Pull PullMode
	// PullWait is how long a long poll of the feed asks the server to
	// hold when nothing is new (default DefaultPullWait, at most
	// transport.MaxChangesWait).
	PullWait time.Duration
	// Batch says whether ready operations go out in batches (default
	// BatchAuto), to a remote whose GET /v1/capabilities advertises
	// them. Batching needs a Transport that is a BatchSender and a
	// CapabilityReader. BatchSize and BatchBytes bound one batch
	// (DefaultBatchSize, DefaultBatchBytes of payload), and so do the
	// remote's advertised limits.
	Batch      BatchMode
	BatchSize  int
	BatchBytes int

	// TestHookAfterClaim, if set, runs in the worker right after an
	// operation turned sending, before the session check that precedes
	// sending it. For tests and crash failpoints.
	TestHookAfterClaim func(op queue.Operation)
	// TestHookAfterResponse, if set, runs after an outcome arrived and
	// before it is recorded in the queue. For tests and crash failpoints.
	TestHookAfterResponse func(op queue.Operation, o transport.Outcome)
}

// Daemon is the sync engine of one data directory.
type Daemon struct {
	store      *queue.Store
	now        func() time.Time
	logger     *slog.Logger
	sender     Sender
	policy     transport.Policy
	conc       int
	sweepEvery time.Duration
	probeEvery time.Duration // <= 0: never probe
	storeFail  storeFailures // failed claims, for a rate-limited log
	lease      time.Duration
	maxAge     time.Duration
	rnd        func(n int64) int64
	owner      string // lease owner prefix; each claim adds a number
	claims     atomic.Uint64
	inSend     atomic.Int64 // sends in flight
	metrics    *metrics
	hooks      hooks

	// writes is held shared by app writes (AccountWrite) and exclusively
	// by Logout, so no write lands in an account that a logout has just
	// signed out or purged.
	writes sync.RWMutex
	// mu guards the session, its generation and the pause.
	mu       sync.Mutex
	session  *queue.Session
	gen      uint64          // grows at every session change
	paused   bool            // the session's token was refused; awaiting a new one
	sessCtx  context.Context // ends with the account's session
	sessDone context.CancelFunc

	wakeMu sync.Mutex
	wakeC  chan struct{} // closed (and replaced) to wake every waiting worker

	onlineMu     sync.Mutex
	online       bool
	contacted    bool          // online is known
	offlineSince time.Time     // first network failure since the last success
	succeeded    bool          // the remote answered well since New
	probeFailed  bool          // a probe got no answer since offlineSince
	answers      uint64        // answers from the remote so far: a probe failure that began before one is stale
	offline      chan struct{} // buffered 1: tells the prober an outage began
	probing      atomic.Bool   // a prober runs: while the remote does not answer, claims wait for it (offlineHold)

	mis misconfig // a remote every operation fails on the same way

	capsReader    CapabilityReader // nil: the remote advertises nothing
	caps          capsState
	batcher       BatchSender // nil: no batches
	batchMode     BatchMode
	batchSize     int
	batchBytes    int
	batchMu       sync.Mutex
	batchOffUntil time.Time // the remote had no batch route; single sends until then
	batchWindow   int       // operations a claim takes now (batchWindow); 0 before the first batch
	batchWireCap  int       // bytes a batch request may have after a 413 (batchTooLarge); 0: the remote's MaxBytes

	puller    Puller        // nil: no pull
	reader    RecordReader  // nil: no refresh
	versions  VersionReader // nil: no history read
	pullMode  PullMode
	pullWait  time.Duration
	pullLimit int
	pull      pullState

	life lifecycle
}

type hooks struct {
	afterClaim    func(queue.Operation)
	afterResponse func(queue.Operation, transport.Outcome)
	// entityRow, when set by a test, replaces the store's EntityRow
	// when a request is built.
	entityRow func(account, entityType, id string) (queue.Entity, error)
}

// New returns a Daemon over cfg.Store, with the session stored in it.
func New(cfg Config) (*Daemon, error) {
	if cfg.Store == nil {
		return nil, errors.New("daemon: Config.Store is nil")
	}
	d := &Daemon{
		store:      cfg.Store,
		now:        cfg.Now,
		logger:     cmp.Or(cfg.Logger, slog.Default()),
		sender:     cfg.Transport,
		policy:     cfg.Policy,
		conc:       cmp.Or(cfg.Concurrency, DefaultConcurrency),
		lease:      cmp.Or(cfg.Lease, DefaultLease),
		sweepEvery: cmp.Or(cfg.SweepInterval, DefaultSweepInterval),
		probeEvery: cmp.Or(cfg.ProbeInterval, DefaultProbeInterval),
		maxAge:     cmp.Or(cfg.MaxOperationAge, DefaultMaxOperationAge),
		rnd:        cfg.Rand,
		owner:      cfg.Owner,
		hooks:      hooks{afterClaim: cfg.TestHookAfterClaim, afterResponse: cfg.TestHookAfterResponse},
		wakeC:      make(chan struct{}),
		offline:    make(chan struct{}, 1),
	}
	if d.now == nil {
		d.now = time.Now
	}
	d.storeFail.now, d.storeFail.logger = d.now, d.logger
	if d.policy.MaxElapsed == 0 {
		// Retrying stops where resending would stop anyway.
		d.policy.MaxElapsed = d.maxAge
	}
	if d.conc < 0 || d.lease < 0 || d.maxAge < 0 {
		return nil, fmt.Errorf("daemon: Concurrency, Lease and MaxOperationAge must not be negative")
	}
	if d.owner == "" {
		host, _ := os.Hostname()
		var b [4]byte
		rand.Read(b[:])
		d.owner = fmt.Sprintf("%s-%d-%s", cmp.Or(host, "syncd"), os.Getpid(), hex.EncodeToString(b[:]))
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg, d)
	if err != nil {
		return nil, err
	}
	d.metrics = m
	sess, err := cfg.Store.LoadSession()
	if err != nil {
		return nil, err
	}
	d.session = sess
	d.pullMode = cmp.Or(cfg.Pull, PullAuto)
	switch d.pullMode {
	case PullAuto, PullOn, PullOff:
	default:
		return nil, fmt.Errorf("daemon: Pull %q: want auto, on or off", cfg.Pull)
	}
	d.pullWait = min(cmp.Or(cfg.PullWait, DefaultPullWait), transport.MaxChangesWait)
	d.pullLimit = DefaultPullLimit
	d.pull.kick = make(chan struct{}, 1)
	if p, ok := cfg.Transport.(Puller); ok && d.pullMode != PullOff {
		d.puller = p
	}
	if r, ok := cfg.Transport.(RecordReader); ok {
		d.reader = r
	}
	if r, ok := cfg.Transport.(VersionReader); ok {
		d.versions = r
	}
	d.batchMode = cmp.Or(cfg.Batch, BatchAuto)
	switch d.batchMode {
	case BatchAuto, BatchOn, BatchOff:
	default:
		return nil, fmt.Errorf("daemon: Batch %q: want auto, on or off", cfg.Batch)
	}
	d.batchSize = min(cmp.Or(cfg.BatchSize, DefaultBatchSize), queue.MaxBatchWrites)
	d.batchBytes = cmp.Or(cfg.BatchBytes, DefaultBatchBytes)
	if b, ok := cfg.Transport.(BatchSender); ok && d.batchMode != BatchOff && d.batchSize > 1 {
		d.batcher = b
	}
	d.capsReader, _ = cfg.Transport.(CapabilityReader)
	d.life.init()
	return d, nil
}

// Store returns the daemon's queue.
func (d *Daemon) Store() *queue.Store { return d.store }

// wake nudges every waiting worker: something may have become ready.
func (d *Daemon) wake() {
	d.wakeMu.Lock()
	close(d.wakeC)
	d.wakeC = make(chan struct{})
	d.wakeMu.Unlock()
}

// wakeChan returns the channel the next wake closes.
func (d *Daemon) wakeChan() <-chan struct{} {
	d.wakeMu.Lock()
	defer d.wakeMu.Unlock()
	return d.wakeC
}

// Notify tells the daemon that the queue has new work (an app write) or
// that time moved (tests with an injected clock).
func (d *Daemon) Notify() { d.wake() }

// Status is the one-screen summary of the daemon's state.
type Status struct {
	AccountID string `json:"accountId,omitempty"`
	SignedIn  bool   `json:"signedIn"`
	// Online is true while the last contact with the remote got an
	// answer, false after a network error or timeout (and before any
	// contact).
	Online bool `json:"online"`
	// Paused is true when sending is held back: no session, the
	// session's token was refused and a new one is awaited, or the
	// remote looks misconfigured (RemoteProblem).
	Paused      bool   `json:"paused"`
	PauseReason string `json:"pauseReason,omitempty"`
	// RemoteProblem is set while sending is paused because every
	// operation fails the same way (PauseRemoteMisconfigured): what was
	// seen and how to fix it.
	RemoteProblem *RemoteProblem `json:"remoteProblem,omitempty"`
	// Counts and OldestPendingAgeSecond cover every account's
	// operations, as the metrics do.
	Counts                 map[queue.State]int `json:"counts"`
	OldestPendingAgeSecond float64             `json:"oldestPendingAgeSeconds"`
	// AccountCounts and AccountOldestPendingAgeSecond are the signed-in
	// account's share of them (absent when signed out): what that
	// account's user and apps see. Operations an account left queued
	// wait until it signs in again, and do not show here.
	AccountCounts                 map[queue.State]int `json:"accountCounts,omitempty"`
	AccountOldestPendingAgeSecond float64             `json:"accountOldestPendingAgeSeconds,omitempty"`
	FileSizeBytes                 int64               `json:"fileSizeBytes"`
	FreeBytes                     int64               `json:"freeBytes"`
	// QueuedBytes is what the operations waiting to be sent take;
	// MaxQueueBytes bounds it (0: no limit), and QueueFull says it is
	// reached: app creates and updates answer 507 storage_full until the
	// queue drains.
	QueuedBytes   int64  `json:"queuedBytes"`
	MaxQueueBytes int64  `json:"maxQueueBytes,omitempty"`
	QueueFull     bool   `json:"queueFull,omitempty"`
	LastEventSeq  uint64 `json:"lastEventSeq"`
	// Pull is the pull of the server's changes.
	Pull PullStatus `json:"pull"`
	// Apps holds, for each app that made operations still kept, their
	// count per state, in every account (Operation.App). Operations made
	// with the admin token are in Counts and in no app's.
	Apps map[string]map[queue.State]int `json:"apps,omitempty"`
}

// Pause reasons of Status.PauseReason.
const (
	PauseSignedOut            = "signed_out"
	PauseSessionRefreshNeeded = "session_refresh_needed"
)

// Status returns the current status.
func (d *Daemon) Status(ctx context.Context) (Status, error) {
	var s Status
	d.mu.Lock()
	if d.session != nil {
		s.AccountID, s.SignedIn = d.session.AccountID, true
	}
	switch {
	case d.session == nil:
		s.Paused, s.PauseReason = true, PauseSignedOut
	case d.paused:
		s.Paused, s.PauseReason = true, PauseSessionRefreshNeeded
	}
	d.mu.Unlock()
	if s.RemoteProblem = d.remoteProblem(); s.RemoteProblem != nil && !s.Paused {
		s.Paused, s.PauseReason = true, PauseRemoteMisconfigured
	}
	s.Online = d.Online()

	// One read for both: the account's share never disagrees with the
	// totals.
	st, err := d.store.StatsFor(s.AccountID)
	if err != nil {
		return Status{}, err
	}
	if s.LastEventSeq, err = d.store.LastEventSeq(); err != nil {
		return Status{}, err
	}
	s.Counts, s.FileSizeBytes, s.FreeBytes = st.Counts, st.FileSize, st.FreeBytes
	s.QueuedBytes, s.MaxQueueBytes, s.QueueFull = st.QueuedBytes, st.MaxQueueBytes, st.QueueFull
	s.OldestPendingAgeSecond = ageSeconds(d.now(), st.OldestPending)
	if st.Account != nil {
		s.AccountCounts, s.AccountOldestPendingAgeSecond = st.Account.Counts, ageSeconds(d.now(), st.Account.OldestPending)
	}
	s.Pull = d.pullStatus(s.AccountID)
	if s.Apps, err = d.store.AppCounts(); err != nil {
		return Status{}, err
	}
	if len(s.Apps) == 0 {
		s.Apps = nil
	}
	return s, nil
}

// ageSeconds is how long before now t was, in seconds; 0 for the zero
// time (none).
func ageSeconds(now, t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return max(0, now.Sub(t).Seconds())
}

// Online reports whether the last contact with the remote got an answer.
func (d *Daemon) Online() bool {
	d.onlineMu.Lock()
	defer d.onlineMu.Unlock()
	return d.online
}
