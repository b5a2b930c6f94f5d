package idempotency

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultSweepInterval is how often a Sweeper deletes expired records when
// SweeperConfig.Interval is zero.
const DefaultSweepInterval = 10 * time.Minute

// SweeperConfig configures a Sweeper. Store is required.
type SweeperConfig struct {
	Store    Store
	Interval time.Duration    // DefaultSweepInterval
	Now      func() time.Time // time.Now; decides what has expired
	Logger   *slog.Logger     // discard
}

// Sweeper owns the background loop that deletes expired records. Start
// it once; Stop stops it and waits for it. Stop is safe before Start and
// safe twice.
type Sweeper struct {
	cfg SweeperConfig

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewSweeper returns a stopped Sweeper.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	if cfg.Store == nil {
		return nil, ErrNoStore
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultSweepInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sweeper{cfg: cfg}, nil
}

// RunOnce deletes the records expired now and returns how many.
func (s *Sweeper) RunOnce(ctx context.Context) (int, error) {
	return s.cfg.Store.Sweep(ctx, s.cfg.Now())
}

// Start starts the loop: a sweep at once, then one every Interval, until
// Stop or until ctx ends. Starting a started Sweeper does nothing.
func (s *Sweeper) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.cancel, s.done = cancel, done
	go func() {
		defer close(done)
		t := time.NewTicker(s.cfg.Interval)
		defer t.Stop()
		for {
			if n, err := s.RunOnce(ctx); err != nil && ctx.Err() == nil {
				s.cfg.Logger.WarnContext(ctx, "idempotency: sweep failed", slog.Any("err", err))
			} else if n > 0 {
				s.cfg.Logger.DebugContext(ctx, "idempotency: swept expired records", slog.Int("count", n))
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// Stop stops the loop and waits for it to end, or for ctx to end.
func (s *Sweeper) Stop(ctx context.Context) {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel, s.done = nil, nil
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
