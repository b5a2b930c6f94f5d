package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/syncd/syncd/queue"
)

// lifecycle is the Start/Stop state of the worker pool.
type lifecycle struct {
	mu      sync.Mutex
	state   int           // lifeNew, lifeRunning, lifeStopped
	stopCh  chan struct{} // closed by Stop: claim nothing more
	hard    context.Context
	cancel  context.CancelFunc // ends the sends in flight
	soft    context.Context    // ends when Stop begins: the puller's long poll
	stopNow context.CancelFunc
	wg      sync.WaitGroup
	stopped chan struct{} // closed when every worker has returned
}

const (
	lifeNew = iota
	lifeRunning
	lifeStopped
)

// loopLife is the Start/Stop state of a background loop with one
// goroutine (Totals, History): started once, stopped once, Stop safe
// twice and before Start.
type loopLife struct {
	mu      sync.Mutex
	state   int // lifeNew, lifeRunning, lifeStopped
	cancel  context.CancelFunc
	stopped chan struct{} // closed when the loop has returned (or at a Stop before Start)
}

func newLoopLife() loopLife { return loopLife{stopped: make(chan struct{})} }

// start runs run on its own goroutine until stop or until ctx ends. A
// second start is a no-op; start after stop does nothing.
func (l *loopLife) start(ctx context.Context, run func(context.Context)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != lifeNew {
		return
	}
	l.state = lifeRunning
	ctx, l.cancel = context.WithCancel(ctx)
	go func() { // owned: stop waits for it
		defer close(l.stopped)
		run(ctx)
	}()
}

// stop ends the loop and waits for it to return.
func (l *loopLife) stop() {
	l.mu.Lock()
	switch l.state {
	case lifeNew:
		l.state = lifeStopped
		close(l.stopped)
		l.mu.Unlock()
		return
	case lifeRunning:
		l.state = lifeStopped
		l.cancel()
	}
	l.mu.Unlock()
	<-l.stopped
}

func (l *lifecycle) init() {
	l.stopCh = make(chan struct{})
	l.stopped = make(chan struct{})
}

// idleRetry is how long a worker waits after the store failed before it
// tries again (a closed store, a full disk): not a tight loop.
const idleRetry = time.Second

// Start starts the worker pool: Concurrency workers that claim the
// current session's ready operations, send them and record the outcomes,
// and sleep until a write (Notify), a session change or the earliest
// next_attempt_at or lease expiry. When ctx ends the workers stop as
// after Stop with an expired deadline. Start fails with ErrNoTransport
// without a Config.Transport, ErrStarted when called twice, and
// ErrStopped after Stop.
func (d *Daemon) Start(ctx context.Context) error {
	if d.sender == nil {
		return ErrNoTransport
	}
	l := &d.life
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case lifeRunning:
		return ErrStarted
	case lifeStopped:
		return ErrStopped
	}
	l.state = lifeRunning
	l.hard, l.cancel = context.WithCancel(ctx)
	l.soft, l.stopNow = context.WithCancel(l.hard)
	l.wg.Add(d.conc + 1)
	for range d.conc {
		go d.worker(l.hard)
	}
	if d.puller != nil {
		l.wg.Add(1)
		go d.runPuller(l.soft)
	}
	go d.sweeper(l.hard)
	if p, ok := d.sender.(Prober); ok && d.probeEvery > 0 {
		d.probing.Store(true)
		l.wg.Add(1)
		go d.prober(l.hard, p)
	}
	go func() {
		l.wg.Wait()
		close(l.stopped)
	}()
	return nil
}

// Stop stops claiming, lets the sends in flight finish until ctx ends,
// then cancels them: their operations go back to pending, ready to be
// sent again. It returns when every worker has returned. Stop is safe to
// call twice and before Start.
func (d *Daemon) Stop(ctx context.Context) {
	l := &d.life
	l.mu.Lock()
	switch l.state {
	case lifeNew:
		l.state = lifeStopped
		close(l.stopCh)
		close(l.stopped)
		l.mu.Unlock()
		return
	case lifeRunning:
		l.state = lifeStopped
		close(l.stopCh)
		l.stopNow() // a long poll has nothing to finish
	}
	l.mu.Unlock()
	select {
	case <-l.stopped:
	case <-ctx.Done():
		if l.cancel != nil { // nil when stopped before Start
			l.cancel()
		}
		<-l.stopped
	}
	if l.cancel != nil {
		l.cancel()
	}
	if c, ok := d.sender.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// worker claims and sends operations until the daemon stops.
func (d *Daemon) worker(hard context.Context) {
	defer d.life.wg.Done()
	failures := 0 // claims failed in a row
	for {
		wake := d.wakeChan() // before claiming, so no wake is missed
		select {
		case <-d.life.stopCh:
			return
		case <-hard.Done():
			return
		default:
		}
		var (
			c       claimed
			ok      bool
			err     error
			noChain bool // a done outcome does not claim the next op alone
		)
		if lim, batch := d.batchFor(hard); batch {
			var cs [][]claimed
			cs, ok, err = d.claimBatch(hard, lim)
			if ok && batchOps(cs) > 1 {
				if failures > 0 {
					failures = 0
					d.storeFail.ok()
				}
				if d.stopping() {
					// Followers first: none is left sending behind a
					// head that is not.
					for _, chain := range cs {
						for i := len(chain) - 1; i >= 0; i-- {
							d.releaseUnsent(chain[i], "stopping")
						}
					}
					return
				}
				d.processBatch(hard, cs, lim)
				continue
			}
			if ok {
				c = cs[0][0]
				// With chains, the next claim is a batch claim again, so
				// what is written behind this one meanwhile goes chained
				// behind it: one operation a round trip, else, however
				// fast the app writes (a done outcome's CompleteAndClaim
				// takes the next head alone).
				noChain = lim.chains
			}
		} else {
			c, ok, err = d.claim(hard)
		}
		if err == nil && failures > 0 {
			failures = 0
			d.storeFail.ok()
		}
		if ok {
			// A done operation's outcome and the next claim share one
			// commit: the worker goes on with what process claimed.
			for ok {
				if d.stopping() {
					// Stop began while this was claimed: nothing new is
					// sent, and an attempt not made is not counted.
					d.releaseUnsent(c, "stopping")
					if c.trial {
						d.endTrial()
					}
					return
				}
				c, ok = d.processOne(hard, c, !noChain)
			}
			continue
		}
		var delay time.Duration
		hasDelay := false
		if err != nil {
			if hard.Err() != nil {
				return
			}
			failures++
			d.storeFail.failed(err)
			delay, hasDelay = idleBackoff(failures), true
		} else if at, ok := d.nextWake(); ok {
			// A wake time already past means the claim raced with a
			// change; look again soon, never spin.
			delay, hasDelay = max(at.Sub(d.now()), time.Millisecond), true
		}
		var timer *time.Timer
		var fire <-chan time.Time
		if hasDelay {
			timer = time.NewTimer(delay)
			fire = timer.C
		}
		select {
		case <-d.life.stopCh:
		case <-hard.Done():
		case <-wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// claimed is an operation a worker holds, and the session it was claimed
// under.
type claimed struct {
	op    queue.Operation
	owner string // the lease owner: this daemon and a claim number
	sess  sessionSnap
	trial bool // the recheck of a remote paused as misconfigured
}

// claim takes the next ready operation of the current session's account.
// ok is false when there is none, when signed out or paused.
func (d *Daemon) claim(ctx context.Context) (c claimed, ok bool, err error) {
	sess, ok := d.snapshot()
	if !ok {
		return c, false, nil
	}
	// A read first: a claim that finds nothing costs a write transaction
	// slot in the queue's group commit, even though it rolls back.
	at, ok, err := d.store.NextWake(sess.account)
	if err != nil || !ok || at.After(d.now()) || d.offlineHold() {
		return c, false, err
	}
	gateOK, trial := d.remoteGate()
	if !gateOK {
		return c, false, nil
	}
	owner := d.newOwner()
	op, err := d.store.Claim(ctx, sess.account, owner, d.lease)
	if err != nil && trial {
		d.endTrial()
	}
	if errors.Is(err, queue.ErrNoReady) {
		return c, false, nil
	}
	if err != nil {
		return c, false, err
	}
	return claimed{op: op, owner: owner, sess: sess, trial: trial}, true, nil
}

// processOne processes c and ends its recheck if it was one, whatever
// became of it.
func (d *Daemon) processOne(hard context.Context, c claimed, chain bool) (next claimed, ok bool) {
	if c.trial {
		defer d.endTrial()
	}
	return d.process(hard, c, chain)
}

// newOwner names a new lease: this daemon and a claim number.
func (d *Daemon) newOwner() string {
	return fmt.Sprintf("%s/%d", d.owner, d.claims.Add(1))
}

// stopping reports whether Stop has been called.
func (d *Daemon) stopping() bool {
	select {
	case <-d.life.stopCh:
		return true
	default:
		return false
	}
}

// nextWake is when the current account may next have something to claim.
func (d *Daemon) nextWake() (time.Time, bool) {
	sess, ok := d.snapshot()
	if !ok {
		return time.Time{}, false
	}
	if d.offlineHold() {
		return time.Time{}, false // the prober wakes the workers when the remote answers
	}
	at, ok, err := d.store.NextWake(sess.account)
	if err != nil {
		return d.now().Add(idleRetry), true
	}
	if check, paused, wait := d.misconfigWake(); ok && paused {
		if wait {
			return time.Time{}, false // the recheck's end wakes the workers
		}
		if check.After(at) {
			at = check
		}
	}
	return at, ok
}

// RunOnce is one pass of the engine, for tests and tools: it claims up to
// Concurrency ready operations of the current session's account, sends
// them concurrently, records every outcome and returns how many it
// processed. It needs a Config.Transport and does not need Start.
func (d *Daemon) RunOnce(ctx context.Context) (int, error) {
	if d.sender == nil {
		return 0, ErrNoTransport
	}
	var wg sync.WaitGroup
	n := 0
	for n < d.conc {
		c, ok, err := d.claim(ctx)
		if err != nil {
			wg.Wait()
			return n, err
		}
		if !ok {
			break
		}
		n++
		wg.Go(func() { d.processOne(ctx, c, false) })
	}
	wg.Wait()
	return n, nil
}

// Drain calls RunOnce until a pass finds nothing ready, and returns how
// many operations it processed. Operations waiting for a later
// next_attempt_at stay waiting.
func (d *Daemon) Drain(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := d.RunOnce(ctx)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}
