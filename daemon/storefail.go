package daemon

import (
	"log/slog"
	"sync"
	"time"
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
	if !f.failing {
		return
	}
	f.logger.Info("daemon: the queue store works again", "failures", f.total, "after", f.now().Sub(f.since).Round(time.Second))
	f.failing, f.failures, f.total = false, 0, 0
}
