// Package daemon is syncd's engine: it owns the session and account
// guard, and (as it grows) the worker pool that drains the queue through
// package transport, backoff, the event bus and metrics, and the start and
// stop lifecycle. It does not parse HTTP requests from apps: package
// localapi does, and calls it.
package daemon

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/syncd/syncd/queue"
)

// Config configures a Daemon. The zero value of every field but Store
// means its default.
type Config struct {
	// Store is the opened queue. The daemon does not close it.
	Store *queue.Store
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Daemon is the sync engine of one data directory.
type Daemon struct {
	store  *queue.Store
	now    func() time.Time
	logger *slog.Logger

	mu      sync.Mutex
	session *queue.Session
	wakeCh  chan struct{}
}

// New returns a Daemon over cfg.Store, with the session stored in it.
func New(cfg Config) (*Daemon, error) {
	d := &Daemon{
		store:  cfg.Store,
		now:    cfg.Now,
		logger: cmp.Or(cfg.Logger, slog.Default()),
		wakeCh: make(chan struct{}, 1),
	}
	if d.now == nil {
		d.now = time.Now
	}
	sess, err := cfg.Store.LoadSession()
	if err != nil {
		return nil, err
	}
	d.session = sess
	return d, nil
}

// Store returns the daemon's queue.
func (d *Daemon) Store() *queue.Store { return d.store }

// wake nudges the workers: something may have become ready.
func (d *Daemon) wake() {
	select {
	case d.wakeCh <- struct{}{}:
	default:
	}
}

// Notify tells the daemon that the queue has new work (an app write).
func (d *Daemon) Notify() { d.wake() }

// Status is the one-screen summary of the daemon's state.
type Status struct {
	AccountID string `json:"accountId,omitempty"`
	SignedIn  bool   `json:"signedIn"`
	// Online is true while the last contact with the remote succeeded.
	Online bool `json:"online"`
	// Paused is true when sending is held back: no session, or the
	// session's token was refused and a new one is awaited.
	Paused                 bool                `json:"paused"`
	PauseReason            string              `json:"pauseReason,omitempty"`
	Counts                 map[queue.State]int `json:"counts"`
	OldestPendingAgeSecond float64             `json:"oldestPendingAgeSeconds"`
	FileSizeBytes          int64               `json:"fileSizeBytes"`
	FreeBytes              int64               `json:"freeBytes"`
	LastEventSeq           uint64              `json:"lastEventSeq"`
}

// Status returns the current status.
func (d *Daemon) Status(ctx context.Context) (Status, error) {
	st, err := d.store.Stats()
	if err != nil {
		return Status{}, err
	}
	seq, err := d.store.LastEventSeq()
	if err != nil {
		return Status{}, err
	}
	s := Status{
		Counts:        st.Counts,
		FileSizeBytes: st.FileSize,
		FreeBytes:     st.FreeBytes,
		LastEventSeq:  seq,
	}
	if !st.OldestPending.IsZero() {
		s.OldestPendingAgeSecond = max(0, d.now().Sub(st.OldestPending).Seconds())
	}
	s.AccountID, s.SignedIn = d.Account()
	if !s.SignedIn {
		s.Paused, s.PauseReason = true, "signed_out"
	}
	return s, nil
}
