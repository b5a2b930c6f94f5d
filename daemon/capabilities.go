package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/syncd/syncd/transport"
)

// The remote's capabilities decide what the daemon asks of it beyond
// single writes (DESIGN.md Part 3): it reads GET {remote}/v1/capabilities
// with the session's token when it starts (the first worker or puller
// that needs them) and an hour after every answer, and
//
//   - sends batches only when they are advertised, no larger than the
//     advertised maxOperations and maxBytes nor the daemon's own limits;
//   - with pull auto, pulls only when "changes" is advertised.
//
// A remote that advertises nothing (404, or an answer that is not a
// capabilities object) gets single requests only: nothing is POSTed to
// /v1/batch. Its feed is still tried with pull auto, as before (a GET,
// and a 404 there says no feed). A read that got no answer (network,
// timeout, 5xx, 401) is retried with backoff, never taken for "none";
// until a first read answers, sends are single and the feed is tried.

// capsRecheck is how long an answer about the capabilities is kept.
const capsRecheck = time.Hour

// CapabilityReader reads the remote's capabilities; *transport.Client is
// one. A Transport that is not one advertises nothing.
type CapabilityReader interface {
	Capabilities(ctx context.Context, token string) (transport.Capabilities, error)
}

// BatchSizer tells how many bytes a request takes in a batch's body;
// *transport.Client is one. Without it the daemon cannot hold batches to
// the remote's maxBytes exactly and sizes them by payload only.
type BatchSizer interface {
	BatchItemBytes(r transport.Request) int
}

// capsState is the last read of the remote's capabilities.
type capsState struct {
	mu       sync.Mutex
	known    capsKnown
	caps     transport.Capabilities // capsAdvertised: what was
	next     time.Time              // when to read again; zero: at the next need
	failures int                    // reads without an answer in a row
	reading  chan struct{}          // closed when the read under way ends
	logged   string                 // what was last logged, so a change is logged once
}

// capsKnown is what the daemon knows of the remote's capabilities.
type capsKnown int

const (
	capsUnknown    capsKnown = iota // no read got an answer yet
	capsNone                        // the remote advertises nothing
	capsAdvertised                  // the remote answered a capabilities object
)

// remoteCaps returns the remote's capabilities, reading them first when
// due. A read under way is waited for (until ctx ends), so the first
// batch is sized by it. A read that got no answer keeps what an earlier
// one learned.
func (d *Daemon) remoteCaps(ctx context.Context, s sessionSnap) (transport.Capabilities, capsKnown) {
	if d.capsReader == nil {
		return transport.Capabilities{}, capsUnknown
	}
	c := &d.caps
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.reading != nil {
		ch := c.reading
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		c.mu.Lock()
		if ctx.Err() != nil {
			return c.caps, c.known
		}
	}
	if !c.next.IsZero() && d.now().Before(c.next) {
		return c.caps, c.known
	}
	ch := make(chan struct{})
	c.reading = ch
	c.mu.Unlock()

	rctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(s.ctx, cancel) // the session ended: drop the read
	got, err := d.capsReader.Capabilities(rctx, s.token)
	unhook()
	cancel()

	c.mu.Lock()
	c.reading = nil
	close(ch)
	wasKnown, wasChanges := c.known, c.caps.Changes
	switch {
	case err == nil || errors.Is(err, transport.ErrNoCapabilities):
		c.known, c.caps, c.failures = capsAdvertised, got, 0
		if err != nil {
			c.known = capsNone
		}
		c.next = d.now().Add(capsRecheck)
		d.logCaps(err)
	case ctx.Err() != nil || s.ctx.Err() != nil:
		// Stopping, or the session ended: not a failure of the remote;
		// the next need reads again.
	default:
		delay := max(d.policy.Backoff.Next(c.failures, d.rnd), idleRetry)
		c.failures++
		c.next = d.now().Add(delay)
		d.logger.Debug("daemon: reading the remote's capabilities failed; trying again", "in", delay, "err", err)
	}
	if c.known != wasKnown || c.caps.Changes != wasChanges {
		d.kickPull() // a puller waiting for the feed to be advertised
	}
	return c.caps, c.known
}

// logCaps logs what the remote advertises when it changed, with caps.mu
// held.
func (d *Daemon) logCaps(err error) {
	c := &d.caps
	what := "none"
	if c.known == capsAdvertised {
		what = fmt.Sprintf("%+v %v", c.caps.Batch, c.caps.Changes)
		if c.caps.Batch != nil {
			what = fmt.Sprintf("%+v %v", *c.caps.Batch, c.caps.Changes)
		}
	}
	if what == c.logged {
		return
	}
	c.logged = what
	level := d.logger.Info
	if d.batcher != nil && d.batchMode == BatchOn && c.caps.Batch == nil {
		level = d.logger.Warn
	}
	switch {
	case c.known == capsNone:
		level("daemon: the remote advertises no capabilities; sending one request per operation", "err", err, "recheck", capsRecheck)
	case c.caps.Batch == nil:
		level("daemon: the remote advertises no batch route; sending one request per operation", "changes", c.caps.Changes, "recheck", capsRecheck)
	default:
		level("daemon: the remote's capabilities", "batchMaxOperations", c.caps.Batch.MaxOperations, "batchMaxBytes", c.caps.Batch.MaxBytes, "changes", c.caps.Changes)
	}
}

// pullAdvertised reports whether the puller may read the feed: always
// with pull on; with pull auto, unless the remote's capabilities (read
// first when due) say it has no feed. A remote that advertises nothing,
// or whose capabilities could not be read yet, has its feed tried.
func (d *Daemon) pullAdvertised(ctx context.Context, s sessionSnap) bool {
	if d.pullMode != PullAuto {
		return true
	}
	caps, known := d.remoteCaps(ctx, s)
	return known != capsAdvertised || caps.Changes
}

// capsWait is how long until the capabilities are read again.
func (d *Daemon) capsWait() time.Duration {
	d.caps.mu.Lock()
	defer d.caps.mu.Unlock()
	return max(d.caps.next.Sub(d.now()), time.Second)
}
