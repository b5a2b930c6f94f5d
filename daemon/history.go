package daemon

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/syncd/syncd/queue"
)

// Defaults of HistoryConfig.
const (
	// DefaultHistoryInterval is how often History takes a sample.
	DefaultHistoryInterval = 10 * time.Second
	// DefaultHistorySamples is how many samples History keeps: an hour
	// at DefaultHistoryInterval.
	DefaultHistorySamples = 360
)

// Sample is one point of the queue's recent history (GET
// /v1/status/history).
type Sample struct {
	At time.Time `json:"at"`
	// Queued is the operations not done, every account's, as Status's
	// Counts have them: pending, sending, retry_waiting and
	// permanent_failed.
	Queued int `json:"queued"`
	// Pending is the operations in state pending; Failed those in
	// permanent_failed.
	Pending int `json:"pending"`
	Failed  int `json:"failed"`
	// Sent is the operations that reached done since the sample before
	// (since History started, for the first): the server acknowledged
	// them. An update superseded unsent by a later write (its
	// operation.state event has MergedInto) is not counted.
	Sent int `json:"sent"`
}

// HistoryStore is what History needs from the queue. *queue.Store is
// one.
type HistoryStore interface {
	Stats() (queue.Stats, error)
}

// HistoryConfig configures a History; the zero value means defaults.
type HistoryConfig struct {
	// Interval between samples (default DefaultHistoryInterval).
	Interval time.Duration
	// Samples is how many samples are kept, the oldest dropped first
	// (default DefaultHistorySamples).
	Samples int
	// Now stamps the samples (default time.Now).
	Now func() time.Time
	// Ticks, if not nil, replaces the loop's own ticker: each value
	// received takes one sample (tests send them).
	Ticks <-chan time.Time
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// History samples the queue's depth and the operations sent, in memory
// only (a restart starts it afresh), for the status page's chart. Chain
// Observe into the queue's OnCommit; it counts the operations that
// reach done and never blocks. Start runs the sampling loop; Stop ends
// it. Samples is safe to call at any time.
type History struct {
	interval time.Duration
	keep     int
	now      func() time.Time
	ticks    <-chan time.Time
	logger   *slog.Logger

	mu      sync.Mutex
	store   HistoryStore
	sent    int      // operations done since the last sample
	samples []Sample // oldest first, at most keep

	life loopLife
}

// NewHistory returns a History; attach the queue with SetStore.
func NewHistory(cfg HistoryConfig) (*History, error) {
	if cfg.Interval < 0 || cfg.Samples < 0 {
		return nil, errors.New("daemon: HistoryConfig.Interval and Samples must not be negative")
	}
	h := &History{
		interval: cmp.Or(cfg.Interval, DefaultHistoryInterval),
		keep:     cmp.Or(cfg.Samples, DefaultHistorySamples),
		now:      cfg.Now,
		ticks:    cfg.Ticks,
		logger:   cmp.Or(cfg.Logger, slog.Default()),
		life:     newLoopLife(),
	}
	if h.now == nil {
		h.now = time.Now
	}
	return h, nil
}

// SetStore attaches the queue the samples read.
func (h *History) SetStore(s HistoryStore) {
	h.mu.Lock()
	h.store = s
	h.mu.Unlock()
}

// Interval is the time between two samples.
func (h *History) Interval() time.Duration { return h.interval }

// Observe is chained into queue.Config.OnCommit: it counts the
// operations that reached done.
func (h *History) Observe(events []queue.Event) {
	n := 0
	for _, e := range events {
		if e.Type == queue.EventOperationState && e.State == queue.StateDone && e.MergedInto == "" {
			n++
		}
	}
	if n == 0 {
		return
	}
	h.mu.Lock()
	h.sent += n
	h.mu.Unlock()
}

// Sample takes one sample now: the queue's counts, and the operations
// sent since the last one. It is the loop's pass; tests call it
// directly.
func (h *History) Sample() (Sample, error) {
	h.mu.Lock()
	s := h.store
	h.mu.Unlock()
	if s == nil {
		return Sample{}, errors.New("daemon: history: no store attached")
	}
	st, err := s.Stats()
	if err != nil {
		return Sample{}, err
	}
	smp := Sample{At: h.now().UTC().Truncate(time.Second), Pending: st.Counts[queue.StatePending], Failed: st.Counts[queue.StatePermanentFailed]}
	for state, n := range st.Counts {
		if state != queue.StateDone {
			smp.Queued += n
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	smp.Sent, h.sent = h.sent, 0
	if len(h.samples) == h.keep {
		copy(h.samples, h.samples[1:])
		h.samples = h.samples[:h.keep-1]
	}
	h.samples = append(h.samples, smp)
	return smp, nil
}

// Samples returns a copy of the samples kept, oldest first.
func (h *History) Samples() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Sample(nil), h.samples...)
}

// Start runs the sampling loop until Stop or until ctx ends. A second
// Start is a no-op; Start after Stop does nothing.
func (h *History) Start(ctx context.Context) {
	ticks := h.ticks
	h.life.start(ctx, func(ctx context.Context) {
		if ticks == nil {
			ticker := time.NewTicker(h.interval)
			defer ticker.Stop()
			ticks = ticker.C
		}
		h.loop(ctx, ticks)
	})
}

func (h *History) loop(ctx context.Context, ticks <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		if _, err := h.Sample(); err != nil && ctx.Err() == nil {
			h.logger.Error("daemon: status history sample", "err", err)
		}
	}
}

// Stop ends the loop and waits for it. Safe twice and before Start.
func (h *History) Stop() { h.life.stop() }
