package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/syncd/syncd/queue"
)

// EventQueueTotals reports the queue's counts per operation state after
// they changed, at most once per TotalsConfig.Interval. Data is
// TotalsData: {"counts":{"pending":n,...},"oldestPendingAgeSeconds":s},
// and while an account is signed in its share, as GET /v1/status has it.
// It goes through the change log like every event, so it has a seq.
const EventQueueTotals = "queue.totals"

// DefaultTotalsInterval is the least time between two queue.totals
// events.
const DefaultTotalsInterval = time.Second

// TotalsStore is what Totals needs from the queue. *queue.Store is one.
type TotalsStore interface {
	StatsFor(account string) (queue.Stats, error)
	AppendEvent(ctx context.Context, e queue.Event) (queue.Event, error)
}

// TotalsConfig configures Totals; the zero value means defaults.
type TotalsConfig struct {
	// Interval is the least time between two events (default
	// DefaultTotalsInterval).
	Interval time.Duration
	// Now is the clock for the oldest pending age (default time.Now).
	Now func() time.Time
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// TotalsData is the Data of a queue.totals event. Counts and
// OldestPendingAgeSeconds cover every account; the Account fields are the
// signed-in account's share (absent when signed out).
type TotalsData struct {
	Counts                         map[queue.State]int `json:"counts"`
	OldestPendingAgeSeconds        float64             `json:"oldestPendingAgeSeconds"`
	AccountID                      string              `json:"accountId,omitempty"`
	AccountCounts                  map[queue.State]int `json:"accountCounts,omitempty"`
	AccountOldestPendingAgeSeconds float64             `json:"accountOldestPendingAgeSeconds,omitempty"`
}

// Totals appends queue.totals events. Chain Observe into the queue's
// OnCommit (after the bus's Publish); it only marks that counts may
// have changed and never blocks. A loop started by Start reads the
// counts at most once per interval and appends an event when they
// differ from the last ones reported.
type Totals struct {
	interval time.Duration
	now      func() time.Time
	logger   *slog.Logger
	kick     chan struct{} // buffered 1: an operation changed since the last pass

	mu          sync.Mutex
	store       TotalsStore
	account     func() (string, bool) // the signed-in account; nil: none
	last        map[queue.State]int
	lastAccount string
	lastShare   map[queue.State]int

	life loopLife
}

// NewTotals returns a Totals; attach the store with SetStore.
func NewTotals(cfg TotalsConfig) *Totals {
	t := &Totals{
		interval: cmp.Or(cfg.Interval, DefaultTotalsInterval),
		now:      cfg.Now,
		logger:   cmp.Or(cfg.Logger, slog.Default()),
		kick:     make(chan struct{}, 1),
		life:     newLoopLife(),
	}
	if t.now == nil {
		t.now = time.Now
	}
	return t
}

// SetStore attaches the queue and takes its current counts as the ones
// already reported: a subscriber reads the starting totals from
// GET /v1/status. (SetAccount then reports the signed-in account's share
// once.)
func (t *Totals) SetStore(s TotalsStore) error {
	st, err := s.StatsFor("")
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.store, t.last = s, st.Counts
	return nil
}

// SetAccount gives the signed-in account (Daemon.Account is one), whose
// share of the counts the events carry from then on.
func (t *Totals) SetAccount(account func() (string, bool)) {
	t.mu.Lock()
	t.account = account
	t.mu.Unlock()
	t.Observe([]queue.Event{{Type: EventSessionChanged}})
}

// Observe is chained into queue.Config.OnCommit: committed operation
// events mean the counts may have changed.
func (t *Totals) Observe(events []queue.Event) {
	for _, e := range events {
		switch e.Type {
		case queue.EventOperationState, queue.EventOperationPurged, queue.EventAccountPurged, EventSessionChanged, EventSessionLoggedOut:
			select {
			case t.kick <- struct{}{}:
			default:
			}
			return
		}
	}
}

// RunOnce appends a queue.totals event if the counts, or the signed-in
// account or its share, differ from the last ones reported, and reports
// whether it did.
func (t *Totals) RunOnce(ctx context.Context) (bool, error) {
	t.mu.Lock()
	s, last, lastAccount, lastShare, accountOf := t.store, t.last, t.lastAccount, t.lastShare, t.account
	t.mu.Unlock()
	if s == nil {
		return false, nil
	}
	var account string
	if accountOf != nil {
		account, _ = accountOf()
	}
	st, err := s.StatsFor(account)
	if err != nil {
		return false, err
	}
	var share map[queue.State]int
	if st.Account != nil {
		share = st.Account.Counts
	}
	if maps.Equal(st.Counts, last) && account == lastAccount && maps.Equal(share, lastShare) {
		return false, nil
	}
	d := TotalsData{Counts: st.Counts, OldestPendingAgeSeconds: ageSeconds(t.now(), st.OldestPending)}
	if st.Account != nil {
		d.AccountID, d.AccountCounts = account, share
		d.AccountOldestPendingAgeSeconds = ageSeconds(t.now(), st.Account.OldestPending)
	}
	data, err := json.Marshal(d)
	if err != nil {
		return false, err
	}
	if _, err := s.AppendEvent(ctx, queue.Event{Type: EventQueueTotals, Data: data}); err != nil {
		return false, err
	}
	t.mu.Lock()
	t.last, t.lastAccount, t.lastShare = st.Counts, account, share
	t.mu.Unlock()
	return true, nil
}

// Start runs the loop until Stop or until ctx ends. A second Start is a
// no-op; Start after Stop does nothing.
func (t *Totals) Start(ctx context.Context) { t.life.start(ctx, t.loop) }

func (t *Totals) loop(ctx context.Context) {
	timer := time.NewTimer(t.interval)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.kick:
		}
		if _, err := t.RunOnce(ctx); err != nil && ctx.Err() == nil {
			t.logger.Error("daemon: queue totals", "err", err)
		}
		// At most one event per interval: changes meanwhile are read on
		// the next pass.
		timer.Reset(t.interval)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
}

// Stop ends the loop and waits for it. Safe twice and before Start.
func (t *Totals) Stop() { t.life.stop() }
