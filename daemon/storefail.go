package daemon

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/syncd/syncd/queue"
)

// When the store fails (a full disk, an I/O error), every worker's claim
// fails until it recovers. Workers back off from idleRetry, doubling up
// to maxIdleRetry, and the log says so once when it starts, at most once
// a storeFailLogEvery while it lasts, and once when it ends: a quiet
// service, not four error lines a second.
const (
	maxIdleRetry      = time.Minute
	storeFailLogEvery = 10 * time.Minute
)

// idleBackoff is a worker's wait after its n-th claim failure in a row
// (n ≥ 1).
func idleBackoff(n int) time.Duration {
	if n > 7 { // 1s << 6 is already past a minute
		n = 7
	}
	return min(idleRetry<<(n-1), maxIdleRetry)
}

// storeFailures counts failed claims across workers and rate-limits
// their log.
type storeFailures struct {
	now    func() time.Time
	logger *slog.Logger

	mu       sync.Mutex
	failing  bool
	since    time.Time // first failure of this run of failures
	logged   time.Time // last log line
	failures int       // since the last log line
	total    int       // since since

	kept keptOutcomes // answers not recorded for a full disk
}

// failed records a failed claim and logs it if it is the first of a run
// or the last line is old enough.
func (f *storeFailures) failed(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	f.failures++
	f.total++
	switch {
	case !f.failing:
		f.failing, f.since, f.logged, f.failures = true, now, now, 0
		f.logger.Error("daemon: the queue store fails; sending waits until it works again (a full disk?)", "err", err)
	case now.Sub(f.logged) >= storeFailLogEvery:
		f.logger.Error("daemon: the queue store still fails", "err", err, "failures", f.failures, "since", f.since)
		f.logged, f.failures = now, 0
	}
}

// ok records a claim that worked (or found nothing to do): a run of
// failures ends.
func (f *storeFailures) ok() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kickLocked() // a write worked: space may have returned
	if !f.failing {
		return
	}
	f.logger.Info("daemon: the queue store works again", "failures", f.total, "after", f.now().Sub(f.since).Round(time.Second))
	f.failing, f.failures, f.total = false, 0, 0
}

// A full disk mid-send. The server answered an operation (applied it,
// refused it, asked for a retry) and the store could not record the
// answer: queue.ErrStorageFull. Left alone, the operation would stay
// sending until its lease ran out (Config.Lease, 90 s) and then be sent
// again. Instead the daemon keeps the answer in memory and writes it
// again when space returns, without sending anything: at every wake
// (Notify: an app write went through), when a worker's claim works
// again, and on a timer from keptRetry doubling to maxKeptRetry. The
// goroutine that kept the first answer of a run writes them
// (flushKept); the others go on.
//
// At most maxKeptOutcomes answers are kept: each is the operation's id,
// its lease owner and the server's answer (a few hundred bytes; a
// conflict's answer also holds the server's record). An answer past the
// bound is dropped and counted, and its operation waits for its lease as
// before. If the daemon stops or dies with answers kept, their
// operations are still sending: the lease runs out (or the next start
// recovers them), they are sent again and answered from the server's
// idempotency record.
//
// The log warns when a run starts, at most once a keptLogEvery while it
// lasts (with the failed writes it did not log, and the answers
// dropped), and says once when the answers are recorded. A full disk is
// a condition of the machine, not an error of syncd: an answer it keeps
// is never logged at ERROR.
const (
	maxKeptOutcomes = 1000
	keptLogEvery    = time.Minute
	keptRetry       = time.Second
	maxKeptRetry    = 15 * time.Second
)

// keptOutcome is an answer of the server the store could not record.
type keptOutcome struct {
	seq   uint64 // tells a newer answer of the same operation from this one
	what  string // for the log: "complete", "retry", ...
	id    string // the operation
	write func(context.Context) error
}

// keptOutcomes are the answers kept during a full disk, and the state of
// their log. Guarded by storeFailures.mu.
type keptOutcomes struct {
	list     []keptOutcome // oldest first
	seq      uint64
	flushing bool          // a goroutine writes them (flushKept)
	kick     chan struct{} // buffered 1: write them now

	full       bool      // a run of full-disk failures is on
	since      time.Time // its first failure
	runWarned  bool      // the run was logged
	warned     time.Time // the last warning, of this run or one before
	suppressed int       // failed writes not logged since warned
	dropped    int       // answers not kept (the bound) in this run
	recorded   int       // answers recorded late in this run
	abandoned  int       // answers given up at stop in this run
}

// keep keeps an answer whose write found the disk full. flush reports
// whether the caller must now write the kept answers (flushKept): no
// goroutine does yet.
func (f *storeFailures) keep(what, id string, err error, write func(context.Context) error) (flush bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := &f.kept
	f.fullLocked(err, "operation", id, "what", what)
	// A newer answer of the operation (it was sent again) replaces one
	// kept.
	k.list = slices.DeleteFunc(k.list, func(o keptOutcome) bool { return o.id == id })
	if len(k.list) >= maxKeptOutcomes {
		k.dropped++
	} else {
		k.seq++
		k.list = append(k.list, keptOutcome{seq: k.seq, what: what, id: id, write: write})
	}
	if k.flushing {
		return false
	}
	k.flushing = true
	return true
}

// fullLocked counts a write that found the disk full, and warns unless
// the last warning is less than keptLogEvery old, of this run of
// failures or of one before it (a disk that fills and empties again and
// again is not a line each time).
func (f *storeFailures) fullLocked(err error, args ...any) {
	k := &f.kept
	now := f.now()
	if !k.full {
		k.full, k.since, k.runWarned = true, now, false
		k.dropped, k.recorded, k.abandoned = 0, 0, 0
	}
	if !k.warned.IsZero() && now.Sub(k.warned) < keptLogEvery {
		k.suppressed++
		return
	}
	args = append(args, "suppressed", k.suppressed, "err", err)
	if k.runWarned {
		f.logger.Warn("daemon: the disk is still full; answers of the server wait in memory",
			append(args, "kept", len(k.list), "dropped", k.dropped, "since", k.since)...)
	} else {
		f.logger.Warn("daemon: the disk is full: answers of the server that cannot be recorded are kept in memory and recorded when space returns", args...)
	}
	k.warned, k.suppressed, k.runWarned = now, 0, true
}

// kickChan returns the channel that tells flushKept to write now.
func (f *storeFailures) kickChan() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.kept.kick == nil {
		f.kept.kick = make(chan struct{}, 1)
	}
	return f.kept.kick
}

// kickLocked tells flushKept to write now, if answers are kept.
func (f *storeFailures) kickLocked() {
	k := &f.kept
	if len(k.list) == 0 || k.kick == nil {
		return
	}
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// snapshotKept returns the kept answers, oldest first.
func (f *storeFailures) snapshotKept() []keptOutcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.kept.list)
}

// settle takes the result of writing a kept answer again. still reports
// that the disk is still full (the answer stays kept); otherwise the
// answer is no longer kept, recorded or not (a lost lease, say).
func (f *storeFailures) settle(o keptOutcome, err error) (still bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := &f.kept
	if errors.Is(err, queue.ErrStorageFull) {
		f.fullLocked(err)
		return true
	}
	k.list = slices.DeleteFunc(k.list, func(x keptOutcome) bool { return x.seq == o.seq })
	if err == nil {
		k.recorded++
	}
	return false
}

// endFlush ends flushKept when no answer is left, and reports whether
// it did. With stopping set, the answers left are given up: their
// operations wait for their leases (or the next start).
func (f *storeFailures) endFlush(stopping bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := &f.kept
	if len(k.list) > 0 && !stopping {
		return false
	}
	if n := len(k.list); n > 0 {
		if k.abandoned == 0 {
			f.logger.Warn("daemon: stopping with answers of the server not recorded (the disk is full); their operations are sent again once their lease runs out or at the next start, and answered from the server's idempotency record",
				"answers", n)
		}
		k.abandoned += n
		k.list = nil
	}
	k.flushing = false
	if k.full && k.abandoned == 0 {
		if k.runWarned {
			f.logger.Info("daemon: space returned; the answers of the server kept in memory are recorded",
				"recorded", k.recorded, "dropped", k.dropped, "after", f.now().Sub(k.since).Round(time.Second))
		}
		k.full = false
	}
	return true
}

// keptBackoff is flushKept's wait after its n-th try that found the disk
// full (n ≥ 1).
func keptBackoff(n int) time.Duration {
	if n > 6 { // 1s << 5 is already past maxKeptRetry
		n = 6
	}
	return min(keptRetry<<(n-1), maxKeptRetry)
}

// keptWriters bounds the kept answers written at once once space
// returned: they share the queue's group commit.
const keptWriters = 16

// flushKept writes the kept answers until none is left, waiting for
// space between tries. keep chose the caller. It returns when every
// answer is recorded (or settled otherwise), or, once the daemon stops,
// after one last try.
func (d *Daemon) flushKept() {
	f := &d.storeFail
	d.life.mu.Lock()
	var hardDone <-chan struct{} // nil before Start: RunOnce waits for space or Stop
	if d.life.hard != nil {
		hardDone = d.life.hard.Done()
	}
	d.life.mu.Unlock()
	for n := 1; ; n++ {
		wake, kick := d.wakeChan(), f.kickChan()
		if d.recordKept() {
			return
		}
		if d.stopping() || chanClosed(hardDone) {
			f.endFlush(true)
			return
		}
		timer := time.NewTimer(keptBackoff(n))
		select {
		case <-d.life.stopCh:
		case <-hardDone:
		case <-wake:
		case <-kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func chanClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// recordKept writes the kept answers, the oldest first: while that one
// finds the disk full, the others would too. It reports whether none is
// left, which ends the flush.
func (d *Daemon) recordKept() bool {
	f := &d.storeFail
	for {
		list := f.snapshotKept()
		if len(list) == 0 {
			if f.endFlush(false) {
				return true
			}
			continue // an answer was kept meanwhile
		}
		if !d.writeKept(list[0]) {
			return false
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, keptWriters)
		for _, o := range list[1:] {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				d.writeKept(o)
			})
		}
		wg.Wait()
	}
}

// writeKept writes one kept answer again; ok is false while the disk is
// still full.
func (d *Daemon) writeKept(o keptOutcome) (ok bool) {
	err := o.write(context.Background())
	if d.storeFail.settle(o, err) {
		return false
	}
	if err != nil {
		d.logNotRecorded(o.what, o.id, err)
	}
	return true
}
