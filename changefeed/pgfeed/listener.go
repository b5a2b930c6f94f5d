// Package pgfeed wakes changefeed long polls across server replicas on
// PostgreSQL: a write's transaction runs NOTIFY with the actor (Notify),
// delivered at its commit to every replica's Listener, which wakes that
// actor's long polls in its process.
package pgfeed

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/syncd/syncd/changefeed"
)

// Channel is the NOTIFY channel.
const Channel = "syncd_changes"

// NotifySQL, run in a write's transaction with the actor as $1, wakes
// the actor's long polls on every replica when the transaction commits.
const NotifySQL = `SELECT pg_notify('` + Channel + `', $1)`

// Listener holds one connection of the pool LISTENing on Channel and
// passes each notification to a Notifier. Start it once; Stop ends it.
type Listener struct {
	pool     *pgxpool.Pool
	notifier *changefeed.Notifier
	log      *slog.Logger
	cancel   context.CancelFunc
	done     chan struct{}
}

// NewListener returns a stopped Listener.
func NewListener(pool *pgxpool.Pool, n *changefeed.Notifier, log *slog.Logger) *Listener {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Listener{pool: pool, notifier: n, log: log}
}

// Start starts listening and returns once the first LISTEN is in place
// (or failed), so a write committed after Start is seen.
func (l *Listener) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	l.cancel, l.done = cancel, make(chan struct{})
	ready := make(chan error, 1)
	go l.run(ctx, ready)
	return <-ready
}

// Stop ends the listener and waits for it.
func (l *Listener) Stop() {
	if l.cancel == nil {
		return
	}
	l.cancel()
	<-l.done
}

func (l *Listener) run(ctx context.Context, ready chan<- error) {
	defer close(l.done)
	backoff := 100 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		err := l.listen(ctx, func() {
			if first {
				ready <- nil
				first = false
			} else {
				// Notifications sent while no connection listened are
				// lost: every long poll reads again.
				l.notifier.NotifyAll()
			}
			backoff = 100 * time.Millisecond
		})
		if ctx.Err() != nil {
			break
		}
		if first {
			ready <- err
			first = false
		}
		l.log.Warn("changefeed: LISTEN connection lost; reconnecting", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, 10*time.Second)
	}
	if first {
		ready <- ctx.Err()
	}
}

// listen takes a connection, LISTENs, calls listening, and passes
// notifications on until the connection fails or ctx ends.
func (l *Listener) listen(ctx context.Context, listening func()) error {
	pc, err := l.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection that LISTENed must not go back to the pool: it leaves
	// it (the pool opens another in its place) and is closed here.
	conn := pc.Hijack()
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return err
	}
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		l.notifier.Notify(n.Payload)
	}
}
