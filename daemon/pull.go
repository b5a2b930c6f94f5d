package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/syncd/syncd/queue"
	"github.com/syncd/syncd/transport"
)

// The puller brings the server's changes into the store: one goroutine,
// for the signed-in account, under the same session guard as the sends
// (never another account's token; a refused token pauses it with the
// sends). It reads the feed page by page, applies each page in one
// transaction with its cursor (queue.Store.ApplyChanges), reading the
// next page meanwhile (one page ahead, see pageAhead), and when it is
// up to date keeps a long poll open, so another device's write arrives
// as soon as the server commits it. Failures back off with jitter; a
// sign-in and the remote coming back wake it at once.

// PullMode says whether the daemon pulls the server's changes.
type PullMode string

// Pull modes.
const (
	// PullAuto pulls when the remote has a changes feed; a remote that
	// answers 404 for it is taken as push-only (logged once, asked
	// again hourly).
	PullAuto PullMode = "auto"
	// PullOn pulls; a 404 is an error, retried with backoff.
	PullOn PullMode = "on"
	// PullOff never pulls.
	PullOff PullMode = "off"
)

// Defaults of the pull.
const (
	// DefaultPullWait is how long a long poll asks the server to hold.
	DefaultPullWait = 30 * time.Second
	// DefaultPullLimit is the page size asked for.
	DefaultPullLimit = transport.DefaultChangesLimit
	// noFeedRecheck is how long a push-only remote (PullAuto) is left
	// before the feed is asked for again.
	noFeedRecheck = time.Hour
)

// Puller reads the changes feed; *transport.Client is one.
type Puller interface {
	Changes(ctx context.Context, token, cursor string, limit int, wait time.Duration) (transport.ChangesPage, error)
}

// Pull states of PullStatus.State.
const (
	PullStateOff           = "off"           // pull off, or a remote without a feed
	PullStateIdle          = "idle"          // up to date; a long poll waits for the next change
	PullStatePulling       = "pulling"       // reading pages
	PullStateBootstrapping = "bootstrapping" // reading everything from the beginning
	PullStatePaused        = "paused"        // signed out, or the token was refused
	PullStateError         = "error"         // the last read failed; retrying with backoff
)

// PullStatus is the pull part of Status.
type PullStatus struct {
	Mode  PullMode `json:"mode"`
	State string   `json:"state"`
	// LastPullAt is when the last page was applied; Received counts the
	// changes applied for the account since its pulls began.
	LastPullAt time.Time `json:"lastPullAt,omitzero"`
	Received   int64     `json:"received"`
	// BootstrapReceived counts the records read so far by the full pass
	// under way (state bootstrapping).
	BootstrapReceived int64 `json:"bootstrapReceived,omitempty"`
	// BootstrapProgress is the share of the server's feed that pass has
	// read, 0 to 1, when the server's pages say (their progress); absent
	// otherwise. It counts the feed's positions, not records: an
	// estimate for a progress bar.
	BootstrapProgress float64 `json:"bootstrapProgress,omitempty"`
	// LastReadAt is when the server's feed last answered (an empty long
	// poll too): how far behind the server this device may be.
	LastReadAt time.Time `json:"lastReadAt,omitzero"`
	// LastError is why the last read failed (state error).
	LastError string `json:"lastError,omitempty"`
}

// pullState is the puller's live state, for Status.
type pullState struct {
	mu      sync.Mutex
	state   string
	lastErr string
	kick    chan struct{} // buffered 1: read now (sign-in, remote back)
	// lastRead is when the feed was last read without an error (an
	// empty long poll too): offline_pull_lag_seconds.
	lastRead time.Time
	// progress is where the last page applied ended in its account's
	// feed, as the server said (changefeed.Progress); of is 0 when it
	// did not say.
	progress pullProgress
	// oneAtATime turns fetch-ahead off (set before Start): each page is
	// read after the one before it is applied. For tests and benchmarks.
	oneAtATime bool
}

func (p *pullState) set(state, lastErr string) {
	p.mu.Lock()
	p.state, p.lastErr = state, lastErr
	p.mu.Unlock()
}

// kickPull wakes the puller out of a backoff or a wait for a session.
func (d *Daemon) kickPull() {
	select {
	case d.pull.kick <- struct{}{}:
	default:
	}
}

// pullProgress is a page's place in its account's feed.
type pullProgress struct {
	account string
	at, of  int64
}

// setProgress keeps where the page just applied for account ended; a
// page without progress, or with a nonsensical one, clears it.
func (p *pullState) setProgress(account string, pr *transport.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pr == nil || pr.Of <= 0 || pr.At < 0 || pr.At > pr.Of {
		p.progress = pullProgress{}
		return
	}
	p.progress = pullProgress{account: account, at: pr.At, of: pr.Of}
}

// clearProgress forgets the progress kept for account, if it is
// account's: another account's (a pass that resumes when it signs in
// again) stays.
func (p *pullState) clearProgress(account string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.progress.account == account {
		p.progress = pullProgress{}
	}
}

// pullStatus reports the pull for Status.
func (d *Daemon) pullStatus(account string) PullStatus {
	ps := PullStatus{Mode: d.pullMode}
	// The stored state first, then the progress kept: the puller clears
	// an account's progress before it begins a pass in the store, so a
	// pass read here as begun never shows the share of the pass before.
	var st queue.PullState
	stored := false
	if account != "" {
		var err error
		st, err = d.store.LoadPullState(account)
		stored = err == nil
	}
	d.pull.mu.Lock()
	ps.State, ps.LastError, ps.LastReadAt = d.pull.state, d.pull.lastErr, d.pull.lastRead
	progress := d.pull.progress
	d.pull.mu.Unlock()
	if ps.State == "" {
		ps.State = PullStateOff
		if d.pullMode != PullOff && d.puller != nil {
			ps.State = PullStatePaused
		}
	}
	if stored {
		ps.LastPullAt, ps.Received = st.LastPullAt, st.Received
		if st.FullPass {
			ps.BootstrapReceived = st.Seen
			if progress.account == account && progress.of > 0 {
				ps.BootstrapProgress = float64(progress.at) / float64(progress.of)
			}
		}
	}
	return ps
}

// runPuller is the puller goroutine; it returns when the daemon stops.
func (d *Daemon) runPuller(soft context.Context) {
	defer d.life.wg.Done()
	failures := 0
	expired := 0             // 410s since the last read that went on from a pass's end
	wait := time.Duration(0) // the long poll of the next read
	limit := d.pullLimit     // halved while pages come back too big
	noFeedLogged := false
	// The next page, read while one is applied: taken by the next turn
	// if it asks for exactly that page at once, else dropped before any
	// wait (a read never outlives the turn after it).
	var ahead *pageAhead
	dropAhead := func() { ahead.stop(); ahead = nil }
	defer dropAhead()
	// A kick from before the start (the stored session's sign-in) is
	// not news.
	select {
	case <-d.pull.kick:
	default:
	}
	for {
		if soft.Err() != nil {
			return
		}
		s, ok := d.snapshot()
		if !ok {
			dropAhead()
			d.setPullState(PullStatePaused, "")
			wait = 0
			if !d.pullSleep(soft, 0) {
				return
			}
			continue
		}
		if !d.pullAdvertised(soft, s) {
			// Pull auto, and the remote's capabilities say it has no
			// feed: nothing is read until they say otherwise.
			dropAhead()
			d.setPullState(PullStateOff, "")
			if !d.pullSleep(soft, d.capsWait()) {
				return
			}
			continue
		}
		st, err := d.store.LoadPullState(s.account)
		if err != nil {
			dropAhead()
			d.logger.Error("daemon: pull: reading the pull state failed", "err", err)
			if !d.pullBackoff(soft, &failures, err) {
				return
			}
			continue
		}
		if st.Cursor == "" && !st.FullPass && !st.Bootstrapped {
			// A pass from the start: a pass before it for this account
			// (signed out with a purge, signed in again) has no say in
			// how far this one is.
			d.pull.clearProgress(s.account)
			if err := d.store.BeginFullPass(context.Background(), s.account); err != nil {
				dropAhead()
				d.logger.Error("daemon: pull: beginning the first read failed", "err", err)
				if !d.pullBackoff(soft, &failures, err) {
					return
				}
				continue
			}
		}
		// A read that retries a failed one leaves the state error (and
		// its last error) until it answers; after a pause (signed out, the
		// feed off) the state says what this read does.
		retrying := failures > 0 && d.pullFailing()
		reading := PullStatePulling
		if st.FullPass || (st.Cursor == "" && !st.Bootstrapped) {
			reading, wait = PullStateBootstrapping, 0
		}
		if !retrying && (reading == PullStateBootstrapping || wait == 0) {
			d.setPullState(reading, "")
		}

		// A kick from before this read is answered by it; one that comes
		// during it wakes the next wait.
		select {
		case <-d.pull.kick:
		default:
		}
		var r pageRead
		if ahead != nil && ahead.s == s && ahead.cursor == st.Cursor && ahead.limit == limit && wait == 0 {
			// Read while the page before it was applied: its answer is
			// taken as a read made now would be.
			r = ahead.result()
			ahead = nil
		} else {
			dropAhead()
			r = d.readPage(soft, s, st.Cursor, limit, wait)
		}
		page, err, elapsed := r.page, r.err, r.elapsed
		if soft.Err() == nil && s.ctx.Err() == nil {
			d.pullContact(err)
		}
		if err == nil {
			d.pull.mu.Lock()
			d.pull.lastRead = d.now()
			d.pull.mu.Unlock()
			if retrying {
				d.setPullState(reading, "") // it answered: no longer failing
			}
		}
		switch {
		case soft.Err() != nil:
			return
		case err == nil:
			if st.Cursor != "" && !st.FullPass {
				expired = 0
			}
		case errors.Is(err, transport.ErrNoFeed) && d.pullMode == PullAuto:
			if !noFeedLogged {
				d.logger.Info("daemon: the remote has no changes feed (404); syncing one way, pushing only", "recheck", noFeedRecheck)
				noFeedLogged = true
			}
			d.setPullState(PullStateOff, "")
			if !d.pullSleep(soft, noFeedRecheck) {
				return
			}
			continue
		case errors.Is(err, transport.ErrCursorExpired):
			expired++
			if expired > 1 {
				// A full pass ended at a cursor the server does not take
				// either (a server whose last page stops below its
				// horizon): read it again, but not in a loop.
				d.logger.Warn("daemon: the server refused the cursor its own full read ended at; reading everything again after a pause", "account", s.account, "times", expired)
				n := expired - 2 // the backoff grows with each one
				if !d.pullBackoff(soft, &n, err) {
					return
				}
			} else {
				d.logger.Info("daemon: the server no longer keeps what the pull cursor needs; reading everything again", "account", s.account)
			}
			d.pull.setProgress(s.account, nil)
			if err := d.store.RestartPull(context.Background(), s.account); err != nil {
				d.logger.Error("daemon: pull: restarting the pull failed", "err", err)
				if !d.pullBackoff(soft, &failures, err) {
					return
				}
			}
			wait = 0
			continue
		case errors.Is(err, transport.ErrResponseTooLarge) && limit > 1:
			// Pages of big records: ask for fewer at a time.
			limit = max(1, limit/2)
			continue
		case errors.Is(err, transport.ErrUnauthorized), errors.Is(err, transport.ErrInvalidToken):
			if d.refreshNeeded(s) {
				reason := transport.CodeUnauthorized
				if errors.Is(err, transport.ErrInvalidToken) {
					reason = transport.CodeInvalidToken
				}
				d.logger.Warn("daemon: the server refused the session's token, or it cannot be sent; pulling and sending are paused until a new token is set", "account", s.account, "reason", reason)
				data, _ := json.Marshal(map[string]string{"reason": reason})
				if _, err := d.store.AppendEvent(context.Background(), queue.Event{Type: EventSessionRefreshNeeded, AccountID: s.account, Data: data}); err != nil {
					d.logger.Error("daemon: append event", "type", EventSessionRefreshNeeded, "err", err)
				}
			}
			continue
		case s.ctx.Err() != nil || !d.current(s):
			continue // the session changed during the read
		default:
			if !d.pullBackoff(soft, &failures, err) {
				return
			}
			wait = 0
			continue
		}
		noFeedLogged = false
		if page.HasMore && page.Cursor != "" && !d.pull.oneAtATime {
			// Fetch ahead: the next page is read while this one is
			// applied. Its cursor is saved only with its own page, and
			// the read is dropped unless the next turn asks for exactly
			// it (a failed apply, a 410 restart or another session drop
			// it).
			ahead = d.readAhead(soft, s, page.Cursor, limit)
		}
		changes := make([]queue.Change, len(page.Changes))
		for i, c := range page.Changes {
			changes[i] = queue.Change{EntityType: c.Type, EntityID: c.ClientID, ServerID: c.ID, Version: c.Version,
				Deleted: c.Deleted, Data: c.Data, OperationID: c.OperationID}
		}
		// As an app write: under the account guard, so a logout (which
		// may purge the account) never runs while a page lands, and a
		// page read under a session that ended is dropped.
		var res queue.PageResult
		// Where the page ends, kept before it lands: a status that shows
		// the page's records also shows its progress.
		d.pull.setProgress(s.account, page.Progress)
		err = d.AccountWrite(func(account string) error {
			if account != s.account || !d.current(s) {
				return errStalePage
			}
			var err error
			res, err = d.store.ApplyChanges(context.Background(), s.account, st.Cursor, changes, page.Cursor, !page.HasMore)
			return err
		})
		if err != nil {
			d.pull.setProgress(s.account, nil)
		}
		if errors.Is(err, errStalePage) || errors.Is(err, ErrNoSession) {
			dropAhead()
			continue
		}
		if err != nil {
			dropAhead()
			d.logger.Error("daemon: pull: applying a page failed", "err", err)
			if !d.pullBackoff(soft, &failures, err) {
				return
			}
			continue
		}
		failures = 0
		if res.Applied+res.Removed > 0 {
			d.logger.Debug("daemon: pulled", "applied", res.Applied, "kept", res.Kept, "skipped", res.Skipped, "removed", res.Removed)
		}
		if page.HasMore {
			wait = 0
			continue
		}
		limit = d.pullLimit
		d.setPullState(PullStateIdle, "")
		if n, err := d.RefreshStale(soft); err != nil && soft.Err() == nil {
			d.logger.Debug("daemon: refreshing stale entities failed; trying again after the next read", "refreshed", n, "err", err)
		}
		if wait > 0 && elapsed < wait/2 && res.Applied+res.Kept+res.Removed == 0 {
			// A long poll answered early with nothing new (this device's
			// own echoes, or a server that does not hold polls): not a
			// loop of requests.
			if !d.pullSleep(soft, minPollInterval) {
				return
			}
		}
		wait = d.pullWait
	}
}

// pageRead is the answer to one read of the feed.
type pageRead struct {
	page    transport.ChangesPage
	err     error
	elapsed time.Duration
}

// readPage reads one page of the feed for s; a sign-out or account
// switch during the read drops it (its error is then the context's).
func (d *Daemon) readPage(soft context.Context, s sessionSnap, cursor string, limit int, wait time.Duration) pageRead {
	ctx, cancel := context.WithCancel(soft)
	defer cancel()
	unhook := context.AfterFunc(s.ctx, cancel) // the session ended: drop the read
	defer unhook()
	began := time.Now()
	page, err := d.puller.Changes(ctx, s.token, cursor, limit, wait)
	return pageRead{page: page, err: err, elapsed: time.Since(began)}
}

// pageAhead is a read of the feed under way in its own goroutine, owned
// by the puller: it either takes the answer (result) or drops the read
// (stop), and never leaves the goroutine behind.
type pageAhead struct {
	s      sessionSnap
	cursor string
	limit  int
	cancel context.CancelFunc
	done   chan struct{}
	r      pageRead
}

// readAhead starts reading the page after cursor for s (no long poll).
func (d *Daemon) readAhead(soft context.Context, s sessionSnap, cursor string, limit int) *pageAhead {
	ctx, cancel := context.WithCancel(soft)
	a := &pageAhead{s: s, cursor: cursor, limit: limit, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.r = d.readPage(ctx, s, cursor, limit, 0)
	}()
	return a
}

// result waits for the read and returns its answer.
func (a *pageAhead) result() pageRead {
	<-a.done
	a.cancel()
	return a.r
}

// stop drops the read and waits for its goroutine; nil is a no-op.
func (a *pageAhead) stop() {
	if a == nil {
		return
	}
	a.cancel()
	<-a.done
}

// pullFailing reports whether the puller waits after a failed read.
func (d *Daemon) pullFailing() bool {
	d.pull.mu.Lock()
	defer d.pull.mu.Unlock()
	return d.pull.state == PullStateError
}

// pullContact tells the reachability tracker what a read of the feed
// learned: an answer (any status) says the remote is reachable, and a
// page says it is well; no answer (a network error, a timeout) says it is
// not. Pushes and pulls share one view (observe), so an idle device that
// only pulls still notices an outage and its end.
func (d *Daemon) pullContact(err error) {
	switch {
	case err == nil:
		d.observe(true, true, false)
	case errors.Is(err, transport.ErrInvalidToken):
		// not sent: says nothing of the remote
	case errors.Is(err, transport.ErrNoFeed), errors.Is(err, transport.ErrCursorExpired),
		errors.Is(err, transport.ErrUnauthorized), errors.Is(err, transport.ErrStatus),
		errors.Is(err, transport.ErrResponseTooLarge), errors.Is(err, transport.ErrInvalidResponse):
		d.observe(true, false, false)
	default:
		d.observe(false, false, false)
	}
	// The kick observe gives when the remote answers again is for a
	// puller waiting; this one has just read.
	select {
	case <-d.pull.kick:
	default:
	}
}

// errStalePage: the session a page was read under ended before it could
// be applied.
var errStalePage = errors.New("daemon: pull: the session changed")

// minPollInterval spaces long polls that come back early with nothing new.
const minPollInterval = time.Second

// setPullState records the pull's state, for Status. (Not an event: a
// write to the change log at every long poll's end would cost a commit.)
func (d *Daemon) setPullState(state, lastErr string) {
	d.pull.set(state, lastErr)
}

// pullBackoff records a failed read and waits before the next, with
// jitter, growing with consecutive failures. It returns false when the
// daemon stops meanwhile.
func (d *Daemon) pullBackoff(soft context.Context, failures *int, err error) bool {
	was := d.pullFailing()
	d.setPullState(PullStateError, err.Error())
	if !was {
		// The prober now has a reason to probe (pullFailing): let it
		// look again, so the read goes as soon as the remote answers.
		d.probeNow()
	}
	delay := d.policy.Backoff.Next(*failures, d.rnd)
	*failures++
	d.logger.Debug("daemon: pull failed; trying again", "in", delay, "err", err)
	return d.pullSleep(soft, delay)
}

// pullSleep waits for d (0: until kicked), a kick (sign-in, the remote
// back, a new token) or the daemon stopping; false when stopping.
func (d *Daemon) pullSleep(soft context.Context, dur time.Duration) bool {
	var timer <-chan time.Time
	if dur > 0 {
		t := time.NewTimer(dur)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-soft.Done():
		return false
	case <-d.pull.kick:
	case <-timer:
	}
	return true
}
